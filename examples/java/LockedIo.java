/**
 * A known idle-causing path: worker threads serialized on one lock that is
 * held across a blocking call. While the holder sleeps in {@code fetch},
 * the other workers wait for the lock, so the CPUs go idle although there
 * is plenty of work: the path Worker.run -> LockedIo.process ->
 * LockedIo.fetch -> Thread.sleep is where the idle time comes from.
 *
 * Usage: java LockedIo [workers] [seconds]
 */
public class LockedIo {
    private static final Object LOCK = new Object();
    private static volatile boolean running = true;
    private static long sink;

    /** Computes for about {@code micros} microseconds (no blocking). */
    static long compute(long micros) {
        long end = System.nanoTime() + micros * 1000;
        long x = 1;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 200; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
        }
        return x;
    }

    /** The blocking call made while holding the lock. */
    static void fetch() throws InterruptedException {
        Thread.sleep(2);
    }

    static void process() throws InterruptedException {
        synchronized (LOCK) {
            fetch();
        }
        sink += compute(300);
    }

    public static void main(String[] args) throws Exception {
        int workers = args.length > 0 ? Integer.parseInt(args[0]) : 4;
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 3;
        Thread[] threads = new Thread[workers];
        for (int i = 0; i < workers; i++) {
            threads[i] = new Thread(() -> {
                try {
                    while (running) {
                        process();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "worker-" + i);
            threads[i].start();
        }
        Thread.sleep((long) (seconds * 1000));
        running = false;
        for (Thread t : threads) {
            t.join();
        }
        System.out.println("done " + (sink == 42 ? "" : "ok"));
    }
}

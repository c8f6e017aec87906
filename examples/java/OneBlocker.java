/**
 * Only one method blocks: worker threads "blk-N" alternate computing in
 * {@code crunch} (never blocks) with sleeping in {@code pause} (the only
 * blocking call). Every dispatch to idle these threads cause should be
 * attributed to the path through {@code OneBlocker.pause}.
 *
 * Usage: java OneBlocker [threads] [seconds]
 */
public class OneBlocker {
    static volatile long sink;

    static long crunch(long micros) {
        long end = System.nanoTime() + micros * 1000;
        long x = 7;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 100; i++) {
                x = x * 2862933555777941757L + 3037000493L;
            }
        }
        return x;
    }

    static void pause() throws InterruptedException {
        Thread.sleep(1);
    }

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 2;
        long stop = System.nanoTime() + (long) (seconds * 1e9);
        Thread[] threads = new Thread[n];
        for (int i = 0; i < n; i++) {
            threads[i] = new Thread(() -> {
                try {
                    while (System.nanoTime() < stop) {
                        sink += crunch(500);
                        pause();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "blk-" + i);
            threads[i].start();
        }
        for (Thread t : threads) {
            t.join();
        }
        System.out.println("done");
    }
}

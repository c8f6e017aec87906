/**
 * A thread pool handing work through wait/notify (after seed 002): a
 * producer puts tasks into a one-slot mailbox, workers take them. Workers
 * wait in {@code Mailbox.take} when the producer is slower than they are,
 * and the producer waits in {@code Mailbox.put} when they are busy.
 *
 * Usage: java HandOff [workers] [tasks]
 */
public class HandOff {
    static final class Mailbox {
        private Runnable task;

        synchronized void put(Runnable r) throws InterruptedException {
            while (task != null) {
                wait();
            }
            task = r;
            notifyAll();
        }

        synchronized Runnable take() throws InterruptedException {
            while (task == null) {
                wait();
            }
            Runnable r = task;
            task = null;
            notifyAll();
            return r;
        }
    }

    static volatile long sink;
    static final Runnable STOP = () -> { };

    static void work(int n) {
        long x = n;
        for (int i = 0; i < 20_000; i++) {
            x = x * 31 + i;
        }
        sink += x;
    }

    public static void main(String[] args) throws Exception {
        int workers = args.length > 0 ? Integer.parseInt(args[0]) : 4;
        int tasks = args.length > 1 ? Integer.parseInt(args[1]) : 20_000;
        long t0 = System.nanoTime();
        Mailbox box = new Mailbox();
        Thread[] pool = new Thread[workers];
        for (int i = 0; i < workers; i++) {
            pool[i] = new Thread(() -> {
                try {
                    while (true) {
                        Runnable r = box.take();
                        if (r == STOP) {
                            return;
                        }
                        r.run();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "pool-" + i);
            pool[i].start();
        }
        for (int i = 0; i < tasks; i++) {
            final int n = i;
            box.put(() -> work(n));
        }
        for (int i = 0; i < workers; i++) {
            box.put(STOP);
        }
        for (Thread t : pool) {
            t.join();
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.println("handed off " + tasks + " tasks ms " + ms);
    }

}

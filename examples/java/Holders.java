import java.util.concurrent.locks.ReentrantLock;

/**
 * Java workloads whose wait chains are known, for idleflow's root causes
 * (the Java twin of {@code examples/c/holders.c}). Each mode runs for the
 * given seconds (default 3):
 *
 * <ul>
 *   <li>{@code hop1}: four {@code handler-N} threads enter a
 *       {@code synchronized} {@code Catalog.serve} briefly; {@code writer}
 *       holds the same monitor while it sleeps 10 ms in
 *       {@code Holders.commitBatch}: root = the writer's sleep (a timer),
 *       chain handler-* (monitor enter on {@code Holders$Catalog}).
 *   <li>{@code chain3}: the handlers wait for {@code Catalog}'s monitor,
 *       held by {@code indexer} while it waits in {@code Holders.indexOne}
 *       for the {@code journal} {@code ReentrantLock}, held by
 *       {@code writer} sleeping in {@code Holders.commitBatch}: root = the
 *       writer's sleep, chain handler-* → indexer.
 * </ul>
 *
 * Usage: {@code java Holders MODE [seconds]}
 */
public class Holders {
    static volatile boolean stop;
    static volatile long work;
    static final ReentrantLock journal = new ReentrantLock();

    static final class Catalog {
        synchronized void serve() {
            spin(10_000);
        }

        synchronized void indexOne() {
            journal.lock();
            try {
                spin(10_000);
            } finally {
                journal.unlock();
            }
        }

        synchronized void holdAndCommit() throws InterruptedException {
            commitBatch();
        }
    }

    static final Catalog catalog = new Catalog();

    static void spin(long ns) {
        long until = System.nanoTime() + ns;
        while (System.nanoTime() < until) {
            work++;
        }
    }

    static void commitBatch() throws InterruptedException {
        Thread.sleep(10);
    }

    static Thread start(String name, Runnable body) {
        Thread t = new Thread(body, name);
        t.start();
        return t;
    }

    interface Step {
        void run() throws InterruptedException;
    }

    /** Runs {@code step} and then spins {@code pauseNs}, until stopped. */
    static Runnable loop(Step step, long pauseNs) {
        return () -> {
            try {
                while (!stop) {
                    step.run();
                    spin(pauseNs);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        };
    }

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "chain3";
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 3.0;
        java.util.List<Thread> threads = new java.util.ArrayList<>();
        switch (mode) {
            case "hop1":
                threads.add(start("writer", loop(catalog::holdAndCommit, 50_000)));
                break;
            case "chain3":
                threads.add(start("writer", loop(() -> {
                    journal.lock();
                    try {
                        commitBatch();
                    } finally {
                        journal.unlock();
                    }
                }, 50_000)));
                threads.add(start("indexer", loop(catalog::indexOne, 20_000)));
                break;
            default:
                System.err.println("usage: java Holders hop1|chain3 [seconds]");
                System.exit(2);
        }
        for (int i = 0; i < 4; i++) {
            threads.add(start("handler-" + i, loop(catalog::serve, 10_000)));
        }
        Thread.sleep((long) (seconds * 1000));
        stop = true;
        for (Thread t : threads) {
            t.join();
        }
    }
}

import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Java programs whose idle-causing wait is known, one per mode, for the
 * end-to-end tests of `record --java waits` (the JVM's flight recorder):
 *
 * <ul>
 *   <li>{@code handoff}: a producer hands tasks to two workers through a
 *       one-slot {@code Mailbox} with wait/notify; the workers are faster, so
 *       they wait in {@code Mailbox.take} (monitor wait on
 *       {@code Waits$Mailbox}, notified by {@code producer}).
 *   <li>{@code convoy}: four clerks post to a {@code Ledger} through a
 *       {@code synchronized} method that sleeps while it holds the monitor;
 *       the others block entering it (monitor enter on {@code Waits$Ledger},
 *       top frame {@code Waits$Ledger.post}, held by a clerk).
 *   <li>{@code busy}: four tellers through a {@code synchronized} method
 *       that computes for 150 µs while it holds the monitor: the others'
 *       waits are shorter than a millisecond (monitor enter on
 *       {@code Waits$Ledger}, top frame {@code Waits$Ledger.tally}).
 *   <li>{@code lock}: the same with a {@code ReentrantLock} (park on
 *       {@code ReentrantLock$NonfairSync}, under {@code Waits.lockedPost}).
 *   <li>{@code sleep}: threads that compute a little and sleep in
 *       {@code Waits.nap}.
 *   <li>{@code socket}: a client that asks a loopback server and blocks in
 *       a socket read ({@code Waits.ask}) while the server computes.
 *   <li>{@code rush}: the convoy, rare waits (about 2 k a second), and from
 *       half the time on also a hand-off storm: two threads pass a token
 *       through a {@code SynchronousQueue}, tens of thousands of waits a
 *       second ({@code Waits.pass}).
 *   <li>{@code late}: {@code busy} started half-way, its threads' names
 *       longer than the kernel's 15 characters.
 * </ul>
 *
 * Usage: java Waits MODE [seconds]
 */
public class Waits {
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

    static final class Mailbox {
        private long task;
        private boolean full;

        synchronized void put(long t) throws InterruptedException {
            while (full) {
                wait();
            }
            task = t;
            full = true;
            notifyAll();
        }

        synchronized long take() throws InterruptedException {
            while (!full) {
                wait();
            }
            full = false;
            notifyAll();
            return task;
        }
    }

    static final class Ledger {
        private long total;

        synchronized void post(long amount) throws InterruptedException {
            total += amount;
            Thread.sleep(1);
        }

        synchronized void tally(long amount) {
            total += amount + compute(150);
        }
    }

    static final ReentrantLock LOCK = new ReentrantLock();
    static long locked;

    static void lockedPost(long amount) throws InterruptedException {
        LOCK.lock();
        try {
            locked += amount;
            Thread.sleep(1);
        } finally {
            LOCK.unlock();
        }
    }

    static void nap() throws InterruptedException {
        Thread.sleep(2);
    }

    static int ask(Socket s, byte[] buf) throws Exception {
        OutputStream out = s.getOutputStream();
        InputStream in = s.getInputStream();
        out.write(1);
        out.flush();
        return in.read(buf);
    }

    static void pass(java.util.concurrent.SynchronousQueue<Long> q, boolean give)
            throws InterruptedException {
        if (give) {
            q.put(1L);
        } else {
            sink += q.take();
        }
    }

    interface Body {
        void run() throws Exception;
    }

    static Thread start(String name, Body body) {
        Thread t = new Thread(() -> {
            try {
                while (running) {
                    body.run();
                }
            } catch (Exception e) {
                if (running) {
                    throw new RuntimeException(e);
                }
            }
        }, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "handoff";
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 2;
        long done = 0;
        switch (mode) {
            case "handoff": {
                Mailbox box = new Mailbox();
                start("producer", () -> {
                    sink += compute(400);
                    box.put(1);
                });
                for (int i = 0; i < 2; i++) {
                    start("worker-" + i, () -> sink += compute(50) + box.take());
                }
                break;
            }
            case "convoy": {
                Ledger ledger = new Ledger();
                for (int i = 0; i < 4; i++) {
                    start("clerk-" + i, () -> {
                        sink += compute(100);
                        ledger.post(1);
                    });
                }
                break;
            }
            case "busy": {
                Ledger ledger = new Ledger();
                for (int i = 0; i < 4; i++) {
                    start("teller-" + i, () -> {
                        sink += compute(100);
                        ledger.tally(1);
                    });
                }
                break;
            }
            case "lock": {
                for (int i = 0; i < 4; i++) {
                    start("clerk-" + i, () -> {
                        sink += compute(100);
                        lockedPost(1);
                    });
                }
                break;
            }
            case "sleep": {
                for (int i = 0; i < 2; i++) {
                    start("napper-" + i, () -> {
                        sink += compute(200);
                        nap();
                    });
                }
                break;
            }
            case "socket": {
                ServerSocket server = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
                start("server", () -> {
                    try (Socket c = server.accept()) {
                        InputStream in = c.getInputStream();
                        OutputStream out = c.getOutputStream();
                        while (running && in.read() >= 0) {
                            sink += compute(2000);
                            out.write(2);
                            out.flush();
                        }
                    }
                });
                Socket s = new Socket(InetAddress.getLoopbackAddress(), server.getLocalPort());
                byte[] buf = new byte[1];
                start("client", () -> sink += ask(s, buf));
                break;
            }
            case "rush": {
                Ledger ledger = new Ledger();
                for (int i = 0; i < 4; i++) {
                    start("clerk-" + i, () -> {
                        sink += compute(100);
                        ledger.post(1);
                    });
                }
                Thread.sleep((long) (seconds * 500));
                seconds /= 2;
                java.util.concurrent.SynchronousQueue<Long> q = new java.util.concurrent.SynchronousQueue<>();
                start("giver", () -> pass(q, true));
                start("taker", () -> pass(q, false));
                break;
            }
            case "late": {
                Thread.sleep((long) (seconds * 500));
                seconds /= 2;
                Ledger ledger = new Ledger();
                for (int i = 0; i < 4; i++) {
                    start("late-teller-with-a-long-name-" + i, () -> {
                        sink += compute(100);
                        ledger.tally(1);
                    });
                }
                break;
            }
            default:
                System.err.println("unknown mode " + mode + " (handoff, convoy, busy, lock, sleep, socket, rush, late)");
                System.exit(2);
        }
        Thread.sleep((long) (seconds * 1000));
        running = false;
        System.out.println("done " + mode + " " + (sink != 42));
    }
}

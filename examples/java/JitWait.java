import java.util.concurrent.locks.LockSupport;

/**
 * A Java thread whose idle-causing method is JIT-compiled: "waiter" calls
 * {@code pause} in a loop, which parks 50 µs each time, so the method is
 * hot (compiled after a few thousand calls) and every park leaves a CPU
 * idle. For the user stacks of {@code record --java stacks}: the switch-out
 * lies under libjvm's Parker, the JIT-compiled {@code pause} and its
 * callers, named from HotSpot's perf map. Run with
 * {@code -XX:CompileCommand=dontinline,JitWait::pause} so that the method
 * keeps a frame of its own.
 *
 * Usage: java JitWait [calls]   (default 20000)
 */
public class JitWait {
    static volatile long sink;

    static long pause(long i) {
        LockSupport.parkNanos(50_000);
        return i * 31 + sink;
    }

    public static void main(String[] args) throws InterruptedException {
        int calls = args.length > 0 ? Integer.parseInt(args[0]) : 20000;
        Thread waiter = new Thread(() -> {
            long s = 0;
            for (int i = 0; i < calls; i++) {
                s += pause(i);
            }
            sink = s;
        }, "waiter");
        waiter.start();
        waiter.join();
    }
}

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.invoke.MutableCallSite;
import java.util.concurrent.locks.LockSupport;

/**
 * Java code that the JIT compiles, throws away and compiles again while its
 * threads block in it. "shaper-N" threads call {@code step} in a loop; it
 * computes an area through a mutable call site (which the JIT inlines into
 * {@code step}) and parks 100 µs, so {@code step} is hot and compiled, and
 * its threads block inside its compiled code. Every PHASE ms the main
 * thread points the call site at the other area: the JVM then deoptimizes
 * every compiled {@code step}, including the frames of the threads parked
 * in it at that moment (their return address is patched to the code's
 * deoptimization handler), and the JIT compiles {@code step} again.
 *
 * Usage: java Recompile [seconds] [phase-ms]   (default 4 and 200)
 */
public class Recompile {
    static final MethodType AREA = MethodType.methodType(long.class, long.class);
    static final MutableCallSite SITE = new MutableCallSite(AREA);
    static final MethodHandle INVOKER = SITE.dynamicInvoker();
    static volatile long sink;

    static long square(long x) {
        return x * x;
    }

    static long triple(long x) {
        return 3 * x;
    }

    static long step(long i) throws Throwable {
        long a = (long) INVOKER.invokeExact(i);
        LockSupport.parkNanos(100_000);
        return a + sink;
    }

    public static void main(String[] args) throws Throwable {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 4;
        long phaseMs = args.length > 1 ? Long.parseLong(args[1]) : 200;
        MethodHandles.Lookup lookup = MethodHandles.lookup();
        MethodHandle[] areas = {
            lookup.findStatic(Recompile.class, "square", AREA),
            lookup.findStatic(Recompile.class, "triple", AREA),
        };
        SITE.setTarget(areas[0]);
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Thread[] shapers = new Thread[2];
        for (int t = 0; t < shapers.length; t++) {
            shapers[t] = new Thread(() -> {
                long s = 0;
                try {
                    for (long i = 0; System.nanoTime() < end; i++) {
                        s += step(i);
                    }
                } catch (Throwable e) {
                    throw new RuntimeException(e);
                }
                sink = s;
            }, "shaper-" + t);
            shapers[t].start();
        }
        int phases = 0;
        while (System.nanoTime() < end) {
            Thread.sleep(phaseMs);
            phases++;
            SITE.setTarget(areas[phases % 2]);
        }
        for (Thread t : shapers) {
            t.join();
        }
        System.out.println("done recompile " + phases);
    }
}

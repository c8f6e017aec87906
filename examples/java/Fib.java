/**
 * A call-heavy workload: naive recursive Fibonacci, one call per node of the
 * recursion. Prints the calls made and the time they took (ms), measured
 * inside the program so that JVM start-up does not count.
 *
 * Usage: java Fib [n] [repeats]
 */
public class Fib {
    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    public static void main(String[] args) {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 25;
        int repeats = args.length > 1 ? Integer.parseInt(args[1]) : 4;
        long t0 = System.nanoTime();
        long sum = 0;
        for (int i = 0; i < repeats; i++) {
            sum += fib(n);
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        // fib(n) makes 2 * fib(n + 1) - 1 calls.
        long a = 0, b = 1;
        for (int i = 0; i < n + 1; i++) {
            long c = a + b;
            a = b;
            b = c;
        }
        long calls = (2 * a - 1) * repeats;
        System.out.println("calls " + calls + " ms " + ms + " sum " + sum);
    }
}

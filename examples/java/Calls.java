/**
 * A program with a known number of calls, for checking call counts:
 * main calls outer() 100 times, each outer() calls leaf() 37 times, and
 * leaf throws (and outer catches) when i % 10 == 9 (i = 9, 19, 29), so
 * 3,700 leaf calls of which 300 exit by exception.
 */
public class Calls {
    static long sink;

    static int leaf(int i) {
        if (i % 10 == 9) {
            throw new IllegalStateException("every tenth");
        }
        return i * 2;
    }

    static void outer() {
        for (int i = 0; i < 37; i++) {
            try {
                sink += leaf(i);
            } catch (IllegalStateException e) {
                sink--;
            }
        }
    }

    public static void main(String[] args) {
        for (int i = 0; i < 100; i++) {
            outer();
        }
        System.out.println("sink " + sink);
    }
}

import java.sql.*;
import java.util.concurrent.atomic.AtomicLong;

/** N client threads updating one hot row of an H2 TCP server for S seconds; prints updates/s. */
public class HotRow {
    public static void main(String[] a) throws Exception {
        int n = Integer.parseInt(a[0]);
        double secs = Double.parseDouble(a[1]);
        String url = "jdbc:h2:tcp://127.0.0.1:9092/mem:hot;DB_CLOSE_DELAY=-1";
        try (Connection c = DriverManager.getConnection(url, "sa", "")) {
            c.createStatement().execute("CREATE TABLE IF NOT EXISTS t(id INT PRIMARY KEY, v BIGINT)");
            c.createStatement().execute("MERGE INTO t KEY(id) VALUES (1, 0)");
        }
        AtomicLong done = new AtomicLong();
        long stop = System.nanoTime() + (long) (secs * 1e9);
        Thread[] ts = new Thread[n];
        for (int i = 0; i < n; i++) {
            ts[i] = new Thread(() -> {
                try (Connection c = DriverManager.getConnection(url, "sa", "")) {
                    PreparedStatement p = c.prepareStatement("UPDATE t SET v = v + 1 WHERE id = 1");
                    while (System.nanoTime() < stop) { p.executeUpdate(); done.incrementAndGet(); }
                } catch (SQLException e) { throw new RuntimeException(e); }
            }, "client-" + i);
            ts[i].start();
        }
        for (Thread t : ts) t.join();
        System.out.printf("updates/s %.0f%n", done.get() / secs);
    }
}

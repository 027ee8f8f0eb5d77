import javax.jms.Connection;
import javax.jms.JMSException;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.TextMessage;
import org.apache.activemq.ActiveMQConnectionFactory;

/** What the test programs share (compiled beside each by tests/system/jms.py): run the program's
 *  body; a failure prints its stack trace and exits 1, the end exits 0; with a watchdog, a body
 *  still running after that many milliseconds prints STUCK and exits 3; and a started connection to a URL. */
public final class JmsProgram {
    public interface Body {
        void run(String[] args) throws Exception;
    }

    private JmsProgram() {
    }

    /** A started connection to the broker at url (an ActiveMQ URL: tcp://, failover:(...), ?jms.* options). */
    public static Connection connect(String url) throws JMSException {
        Connection connection = new ActiveMQConnectionFactory(url).createConnection();
        connection.start();
        return connection;
    }

    public static void main(String[] args, Body body) {
        main(args, body, 0);
    }

    public static void main(String[] args, Body body, long watchdogMillis) {
        if (watchdogMillis > 0) {
            Thread watchdog = new Thread(() -> {
                try {
                    Thread.sleep(watchdogMillis);
                } catch (InterruptedException e) {
                    return;
                }
                System.out.println("STUCK");
                System.out.flush();
                System.exit(3);
            });
            watchdog.setDaemon(true);
            watchdog.start();
        }
        try {
            body.run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    /** A text message's text, "null" for none. */
    public static String text(Message m) throws JMSException {
        return m == null ? "null" : ((TextMessage) m).getText();
    }

    /** The texts of the next `n` messages (10 s each at most), sorted, space-separated. */
    public static String receiveSorted(MessageConsumer c, int n) throws JMSException {
        java.util.List<String> got = new java.util.ArrayList<>();
        for (int i = 0; i < n; i++) got.add(text(c.receive(10000)));
        java.util.Collections.sort(got);
        return String.join(" ", got);
    }
}

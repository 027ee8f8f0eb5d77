import javax.jms.Connection;
import javax.jms.JMSException;
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
}

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import javax.jms.*;
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;

/** Failover clients that a cluster may move (rebalanceClusterClients): args url queue clients after.
 *  Each of `clients` connections produces persistent messages (synchronous sends, id "c-n") and
 *  consumes the queue (client acknowledgement, synchronous acks, each message acknowledged as
 *  received). A monitor prints "AT client port" whenever a connection is on another broker. The
 *  producers go on until some connection has moved and each has sent `after` more (or `seconds` have passed),
 *  then print "SENT total"; the consumers go on until nothing came for 5 s. Every receipt is a
 *  line "GOT id redelivered(true|false)". */
public class JmsRebalance {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsRebalance::run, 180000);
    }

    static String where(ActiveMQConnection c) {
        String address = c.getTransport().getRemoteAddress();
        if (address == null) {
            return "-";
        }
        return address.substring(address.lastIndexOf(':') + 1);
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void run(String[] args) throws Exception {
        String url = args[0];
        String name = args[1];
        int clients = Integer.parseInt(args[2]);
        int after = Integer.parseInt(args[3]);
        long seconds = Long.parseLong(args[4]);
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(url);
        factory.setSendAcksAsync(false);
        factory.setWatchTopicAdvisories(false);
        factory.getPrefetchPolicy().setAll(10);
        List<ActiveMQConnection> connections = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            ActiveMQConnection c = (ActiveMQConnection) factory.createConnection();
            c.start();
            connections.add(c);
        }
        AtomicBoolean moved = new AtomicBoolean();
        AtomicBoolean done = new AtomicBoolean();
        String[] at = new String[clients];
        Thread monitor = new Thread(() -> {
            while (!done.get()) {
                for (int i = 0; i < clients; i++) {
                    String now = where(connections.get(i));
                    if (!now.equals("-") && !now.equals(at[i])) {
                        if (at[i] != null) {
                            moved.set(true);
                        }
                        at[i] = now;
                        say("AT " + i + " " + now);
                    }
                }
                try {
                    Thread.sleep(50);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        monitor.setDaemon(true);
        monitor.start();

        AtomicLong lastReceipt = new AtomicLong(System.nanoTime());
        AtomicInteger sent = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            final int index = i;
            final ActiveMQConnection c = connections.get(i);
            Session consuming = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            MessageConsumer consumer = consuming.createConsumer(consuming.createQueue(name));
            Thread receiver = new Thread(() -> {
                try {
                    while (true) {
                        Message m = consumer.receive(500);
                        if (m == null) {
                            if (done.get() && System.nanoTime() - lastReceipt.get() > 5_000_000_000L) {
                                return;
                            }
                            continue;
                        }
                        lastReceipt.set(System.nanoTime());
                        say("GOT " + ((TextMessage) m).getText() + " " + m.getJMSRedelivered());
                        m.acknowledge();
                    }
                } catch (JMSException e) {
                    say("RECEIVE-FAILED " + index + " " + e);
                }
            });
            Session producing = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = producing.createProducer(producing.createQueue(name));
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            Thread sender = new Thread(() -> {
                long deadline = System.nanoTime() + seconds * 1_000_000_000L;
                int n = 0;
                int left = after;
                try {
                    while (left > 0 && System.nanoTime() < deadline) {
                        producer.send(producing.createTextMessage(index + "-" + n));
                        n++;
                        sent.incrementAndGet();
                        if (moved.get()) {
                            left--;
                        }
                        Thread.sleep(20);
                    }
                } catch (Exception e) {
                    say("SEND-FAILED " + index + " " + e);
                }
            });
            threads.add(sender);
            threads.add(receiver);
            receiver.start();
            sender.start();
        }
        for (int i = 0; i < threads.size(); i += 2) {
            threads.get(i).join();
        }
        say("SENT " + sent.get());
        lastReceipt.set(System.nanoTime());
        done.set(true);
        for (int i = 1; i < threads.size(); i += 2) {
            threads.get(i).join();
        }
        for (int i = 0; i < clients; i++) {
            say("FINAL " + i + " " + where(connections.get(i)));
        }
        for (ActiveMQConnection c : connections) {
            c.close();
        }
    }
}

import javax.jms.*;
import org.apache.activemq.ActiveMQConnectionFactory;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/** One producer -> one consumer through a queue with ActiveMQ's JMS client (bench/jms.py).
 *  args: url queue count size persistent(true|false). The consumer (its own connection,
 *  auto-acknowledge, a MessageListener) is ready before the producer (its own connection) sends
 *  COUNT BytesMessages of SIZE bytes built before the clock starts. Prints
 *  "RESULT <count> <seconds from the first send to the last message received>" or, when the
 *  messages do not all come within the deadline, "INCOMPLETE <received>" and exits 2. */
public class JmsBench {
    public static void main(String[] args) throws Exception {
        String url = args[0], queueName = args[1];
        int count = Integer.parseInt(args[2]), size = Integer.parseInt(args[3]);
        boolean persistent = Boolean.parseBoolean(args[4]);
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(url);
        Connection consumerConnection = factory.createConnection();
        Connection producerConnection = factory.createConnection();
        consumerConnection.start();
        producerConnection.start();
        Session cs = consumerConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = cs.createConsumer(cs.createQueue(queueName));
        CountDownLatch done = new CountDownLatch(1);
        final int[] got = {0};
        final long[] end = {0};
        consumer.setMessageListener(m -> {
            if (++got[0] == count) {
                end[0] = System.nanoTime();
                done.countDown();
            }
        });
        Session ps = producerConnection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = ps.createProducer(ps.createQueue(queueName));
        producer.setDeliveryMode(persistent ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT);
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'x');
        BytesMessage message = ps.createBytesMessage();
        message.writeBytes(body);
        long t0 = System.nanoTime();
        for (int i = 0; i < count; i++) {
            producer.send(message);
        }
        if (!done.await(120 + count / 500, TimeUnit.SECONDS)) {
            System.out.println("INCOMPLETE " + got[0]);
            System.out.flush();
            System.exit(2);
        }
        System.out.println("RESULT " + count + " " + (end[0] - t0) / 1e9);
        System.out.flush();
        producerConnection.close();
        consumerConnection.close();
        System.exit(0);
    }
}

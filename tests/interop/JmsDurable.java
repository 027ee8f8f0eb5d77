import javax.jms.*;
import org.apache.activemq.ActiveMQConnectionFactory;

/** A durable topic subscriber: args url topic count step(subscribe|publish|receive). subscribe
 *  makes the subscription (client id "jms-durable", name "sub") and leaves; publish sends count
 *  persistent messages; receive takes them, acknowledges, unsubscribes. Prints one line. */
public class JmsDurable {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsDurable::run);
    }

    static void run(String[] args) throws Exception {
        String url = args[0], topicName = args[1], step = args[3];
        int count = Integer.parseInt(args[2]);
        Connection connection = new ActiveMQConnectionFactory(url).createConnection();
        if (!step.equals("publish")) connection.setClientID("jms-durable");
        connection.start();
        Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        Topic topic = session.createTopic(topicName);
        if (step.equals("subscribe")) {
            session.createDurableSubscriber(topic, "sub").close();
            System.out.println("SUBSCRIBED");
        } else if (step.equals("publish")) {
            MessageProducer producer = session.createProducer(topic);
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            for (int i = 0; i < count; i++) producer.send(session.createTextMessage("news " + i));
            System.out.println("PUBLISHED " + count);
        } else {
            MessageConsumer consumer = session.createDurableSubscriber(topic, "sub");
            int got = 0;
            Message last = null;
            while (got < count + 1) {
                Message m = consumer.receive(got < count ? 10000 : 2000);
                if (m == null) break;
                if (!((TextMessage) m).getText().equals("news " + got)) System.out.println("OUT OF ORDER " + got);
                got++;
                last = m;
            }
            if (last != null) last.acknowledge();
            consumer.close();
            session.unsubscribe("sub");
            System.out.println("RECEIVED " + got);
        }
        connection.close();
    }
}

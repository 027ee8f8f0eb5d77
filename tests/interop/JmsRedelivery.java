import javax.jms.*;
import org.apache.activemq.command.ActiveMQMessage;

/** Redelivery counts and dead letters: args url queue dlq mode.
 *  rollback: one message received in a transacted session and rolled back until the client's
 *    redelivery policy (the url's jms.redeliveryPolicy.maximumRedeliveries) gives up: DELIVERY
 *    count redelivered for each, then DLQ text origin (its original destination), LEFT n.
 *  close: five messages; a client-ack consumer (prefetch 10) receives the first and closes
 *    without acknowledging; another receives all five: AGAIN text count redelivered each (only
 *    the one the application saw counts as delivered).
 *  attempts: one message received and its consumer closed without acknowledging until it stops
 *    coming (the broker's max_delivery_attempts): DELIVERY count redelivered each, then DLQ and LEFT. */
public class JmsRedelivery {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsRedelivery::run);
    }

    static String describe(Message m) throws JMSException {
        return m.getIntProperty("JMSXDeliveryCount") + " " + m.getJMSRedelivered();
    }

    static void run(String[] args) throws Exception {
        String url = args[0], name = args[1], dlq = args[2], mode = args[3];
        Connection connection = JmsProgram.connect(url);
        Session plain = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        Queue queue = plain.createQueue(name);
        MessageProducer producer = plain.createProducer(queue);
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        if (mode.equals("rollback")) {
            producer.send(plain.createTextMessage("poison"));
            Session tx = connection.createSession(true, Session.SESSION_TRANSACTED);
            MessageConsumer consumer = tx.createConsumer(queue);
            Message m;
            while ((m = consumer.receive(3000)) != null) {
                System.out.println("DELIVERY " + describe(m));
                tx.rollback();
            }
            consumer.close();
            tx.close();
        } else if (mode.equals("close")) {
            for (int i = 0; i < 5; i++) producer.send(plain.createTextMessage("m" + i));
            MessageConsumer first = plain.createConsumer(queue);
            Message m = first.receive(10000);
            System.out.println("FIRST " + ((TextMessage) m).getText() + " " + describe(m));
            first.close();
            MessageConsumer again = plain.createConsumer(queue);
            Message last = null;
            for (int i = 0; i < 5 && (m = again.receive(10000)) != null; i++) {
                System.out.println("AGAIN " + ((TextMessage) m).getText() + " " + describe(m));
                last = m;
            }
            if (last != null) last.acknowledge();
            again.close();
        } else {
            producer.send(plain.createTextMessage("attempted"));
            while (true) {
                MessageConsumer consumer = plain.createConsumer(queue);
                Message m = consumer.receive(3000);
                consumer.close();  // without acknowledging
                if (m == null) break;
                System.out.println("DELIVERY " + describe(m));
            }
        }
        if (!mode.equals("close")) {
            MessageConsumer dead = plain.createConsumer(plain.createQueue(dlq));
            Message m = dead.receive(10000);
            System.out.println(m == null ? "DLQ none" : "DLQ " + ((TextMessage) m).getText() + " "
                               + ((ActiveMQMessage) m).getOriginalDestination());
            if (m != null) m.acknowledge();
            MessageConsumer rest = plain.createConsumer(queue);
            int left = 0;
            while (rest.receive(1000) != null) left++;
            System.out.println("LEFT " + left);
        }
        connection.close();
    }
}

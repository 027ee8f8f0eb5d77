import javax.jms.*;

/** Local transactions: args url queue count. Sends count messages and rolls back, sends them
 *  again and commits; receives them and rolls back, receives them again (redelivered) and
 *  commits; then looks once more. Prints one line a step. */
public class JmsTransactions {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsTransactions::run);
    }

    static int receive(MessageConsumer consumer, int count, boolean[] redelivered) throws JMSException {
        int got = 0;
        while (got < count) {
            Message m = consumer.receive(got == 0 ? 10000 : 5000);
            if (m == null) break;
            if (!m.getJMSRedelivered()) redelivered[0] = false;
            if (count == 1) System.out.println("LEFTOVER " + ((TextMessage) m).getText() + " redelivered=" + m.getJMSRedelivered());
            got++;
        }
        return got;
    }

    static void run(String[] args) throws Exception {
        String url = args[0], queueName = args[1];
        int count = Integer.parseInt(args[2]);
        Connection connection = JmsProgram.connect(url);
        Session session = connection.createSession(true, Session.SESSION_TRANSACTED);
        Queue queue = session.createQueue(queueName);
        MessageProducer producer = session.createProducer(queue);
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        for (int i = 0; i < count; i++) producer.send(session.createTextMessage("rolled back " + i));
        session.rollback();
        for (int i = 0; i < count; i++) producer.send(session.createTextMessage("committed " + i));
        session.commit();
        System.out.println("SENT " + count);
        MessageConsumer consumer = session.createConsumer(queue);
        boolean[] redelivered = {true};
        System.out.println("FIRST " + receive(consumer, count, new boolean[] {true}));
        session.rollback();
        System.out.println("AGAIN " + receive(consumer, count, redelivered) + " redelivered=" + redelivered[0]);
        session.commit();
        System.out.println("LEFT " + receive(consumer, 1, new boolean[] {true}));
        session.commit();
        connection.close();
    }
}

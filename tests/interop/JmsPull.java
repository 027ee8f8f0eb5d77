import javax.jms.*;

/** Prefetch 0 consumers (MessagePull): args url queue; the url sets jms.prefetchPolicy.all=0.
 *  Prints TIMED null (a receive(timeout) on an empty queue returns), NOWAIT null, FIRST text
 *  (the consumer that asks first gets the first message: nothing was pushed to the other one),
 *  SECOND text, LATE text (a message sent after a timed-out receive goes to the consumer that asks
 *  next, not to the one whose receive timed out), and RECEIVED n for 50 more sent and received. */
public class JmsPull {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsPull::run, 90000);
    }

    static String text(Message m) throws JMSException {
        return m == null ? "null" : ((TextMessage) m).getText();
    }

    static void run(String[] args) throws Exception {
        String url = args[0], name = args[1];
        Connection connection = JmsProgram.connect(url);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue(name);
        MessageConsumer one = session.createConsumer(queue);
        MessageConsumer two = session.createConsumer(queue);
        System.out.println("TIMED " + text(one.receive(300)));
        System.out.println("NOWAIT " + text(one.receiveNoWait()));
        MessageProducer producer = session.createProducer(queue);
        producer.send(session.createTextMessage("m0"));
        producer.send(session.createTextMessage("m1"));
        System.out.println("FIRST " + text(two.receive(10000)));
        System.out.println("SECOND " + text(one.receive(10000)));
        System.out.println("TIMED " + text(one.receive(200)));
        producer.send(session.createTextMessage("late"));
        System.out.println("LATE " + text(two.receive(10000)));
        for (int i = 0; i < 50; i++) producer.send(session.createTextMessage("n" + i));
        int got = 0;
        MessageConsumer[] both = {one, two};
        while (got < 50 && both[got % 2].receive(10000) != null) got++;
        System.out.println("RECEIVED " + got);
        connection.close();
    }
}

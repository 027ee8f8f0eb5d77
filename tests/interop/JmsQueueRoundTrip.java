import javax.jms.*;

/** Sends N persistent text messages to a queue, then receives them (client-ack or auto-ack):
 *  args: url destination ("name" a queue, "topic:name" a topic) count mode(send|receive|both) ackMode(auto|client). Prints SENT n, then
 *  one GOT line a message and RECEIVED n. */
public class JmsQueueRoundTrip {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsQueueRoundTrip::roundTrip);
    }

    static void roundTrip(String[] args) throws Exception {
        String url = args[0], queueName = args[1];
        int count = Integer.parseInt(args[2]);
        String mode = args.length > 3 ? args[3] : "both";
        boolean clientAck = args.length > 4 && args[4].equals("client");
        Connection connection = JmsProgram.connect(url);
        Session session = connection.createSession(false, clientAck ? Session.CLIENT_ACKNOWLEDGE : Session.AUTO_ACKNOWLEDGE);
        boolean topic = queueName.startsWith("topic:");
        Destination queue = topic ? session.createTopic(queueName.substring(6)) : session.createQueue(queueName);
        MessageConsumer early = topic ? session.createConsumer(queue) : null;  // a topic keeps nothing for later
        if (!mode.equals("receive")) {
            MessageProducer producer = session.createProducer(queue);
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            for (int i = 0; i < count; i++) {
                TextMessage m = session.createTextMessage("message " + i + " \u00e9\u20ac\ud83d\ude00");
                m.setIntProperty("index", i);
                m.setStringProperty("origin", "jms");
                producer.send(m);
                if ((i + 1) % 100 == 0) {
                    System.out.println("PROGRESS " + (i + 1));
                    System.out.flush();
                }
            }
            System.out.println("SENT " + count);
            System.out.flush();
        }
        if (!mode.equals("send")) {
            MessageConsumer consumer = early != null ? early : session.createConsumer(queue);
            int got = 0;
            Message last = null;
            while (got < count) {
                Message m = consumer.receive(20000);
                if (m == null) break;
                TextMessage t = (TextMessage) m;
                System.out.println("GOT " + t.getIntProperty("index") + " " + t.getText() + " persistent="
                        + (t.getJMSDeliveryMode() == DeliveryMode.PERSISTENT) + " redelivered=" + t.getJMSRedelivered());
                got++;
                last = m;
            }
            if (clientAck && last != null) last.acknowledge();
            System.out.println("RECEIVED " + got);
            System.out.flush();
        }
        connection.close();
    }
}

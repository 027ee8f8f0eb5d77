import javax.jms.*;

/** Producer flow control: args url queue count; the url sets jms.producerWindowSize (and
 *  jms.useAsyncSend for persistent async sends). Sends count non-persistent and count persistent
 *  1 KiB text messages, none of them asking for a response: with a window of a few KiB the
 *  client waits for the broker's ProducerAcks after a few messages. Prints SENT n, then
 *  RECEIVED n; STUCK (exit 3) when nothing moves for 60 s. */
public class JmsProducerWindow {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsProducerWindow::run, 60000);
    }

    static void run(String[] args) throws Exception {
        String url = args[0], name = args[1];
        int count = Integer.parseInt(args[2]);
        Connection connection = JmsProgram.connect(url);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue(name);
        MessageProducer producer = session.createProducer(queue);
        StringBuilder body = new StringBuilder();
        while (body.length() < 1024) body.append("window ");
        int sent = 0;
        for (int mode : new int[] {DeliveryMode.NON_PERSISTENT, DeliveryMode.PERSISTENT}) {
            producer.setDeliveryMode(mode);
            for (int i = 0; i < count; i++) {
                TextMessage m = session.createTextMessage(body.toString());
                m.setIntProperty("index", sent);
                producer.send(m);
                sent++;
            }
        }
        System.out.println("SENT " + sent);
        System.out.flush();
        MessageConsumer consumer = session.createConsumer(queue);
        int got = 0;
        while (got < sent && consumer.receive(10000) != null) got++;
        System.out.println("RECEIVED " + got);
        connection.close();
    }
}

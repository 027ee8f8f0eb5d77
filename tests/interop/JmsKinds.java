import java.util.*;
import javax.jms.*;

/** Every JMS message kind through the broker, and a selector: args url queue. Prints one line a
 *  kind with what came back, then SELECTED n for the selector "index >= 5 AND colour = 'blue'". */
public class JmsKinds {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsKinds::run);
    }

    static void run(String[] args) throws Exception {
        Connection connection = JmsProgram.connect(args[0]);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        javax.jms.Queue queue = session.createQueue(args[1]);
        MessageProducer producer = session.createProducer(queue);
        BytesMessage bytes = session.createBytesMessage();
        bytes.writeBytes(new byte[] {0, 1, 2, (byte) 255});
        producer.send(bytes);
        MapMessage map = session.createMapMessage();
        map.setString("name", "petrel");
        map.setInt("n", 42);
        producer.send(map);
        producer.send(session.createObjectMessage(new ArrayList<>(List.of("a", "b"))));
        StreamMessage stream = session.createStreamMessage();
        stream.writeString("s");
        stream.writeLong(7L);
        producer.send(stream);
        Message plain = session.createMessage();
        plain.setLongProperty("big", 1L << 40);
        plain.setBooleanProperty("flag", true);
        plain.setShortProperty("short", (short) 3);
        producer.send(plain);
        MessageConsumer consumer = session.createConsumer(queue);
        for (int i = 0; i < 5; i++) {
            Message m = consumer.receive(10000);
            if (m instanceof BytesMessage) {
                BytesMessage b = (BytesMessage) m;
                byte[] got = new byte[(int) b.getBodyLength()];
                b.readBytes(got);
                System.out.println("BYTES " + Arrays.toString(got));
            } else if (m instanceof MapMessage) {
                MapMessage mm = (MapMessage) m;
                System.out.println("MAP " + mm.getString("name") + " " + mm.getInt("n"));
            } else if (m instanceof ObjectMessage) {
                System.out.println("OBJECT " + ((ObjectMessage) m).getObject());
            } else if (m instanceof StreamMessage) {
                StreamMessage sm = (StreamMessage) m;
                System.out.println("STREAM " + sm.readString() + " " + sm.readLong());
            } else if (m != null) {
                System.out.println("PLAIN " + m.getLongProperty("big") + " " + m.getBooleanProperty("flag") + " "
                        + m.getShortProperty("short"));
            } else {
                System.out.println("NONE");
            }
        }
        consumer.close();
        for (int i = 0; i < 10; i++) {
            TextMessage t = session.createTextMessage("t" + i);
            t.setIntProperty("index", i);
            t.setStringProperty("colour", i % 2 == 0 ? "blue" : "red");
            producer.send(t);
        }
        MessageConsumer selected = session.createConsumer(queue, "index >= 5 AND colour = 'blue'");
        int n = 0;
        StringBuilder which = new StringBuilder();
        while (selected.receive(3000) instanceof TextMessage t) {
            n++;
            which.append(' ').append(t.getText());
        }
        System.out.println("SELECTED " + n + which);
        connection.close();
    }
}

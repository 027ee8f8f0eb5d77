import java.util.*;
import javax.jms.*;

/** JMS message bodies for the cross-protocol tests: args url send|receive destination [n].
 *  A destination is queue:NAME or topic:NAME. send: one message of each kind (text, bytes, map,
 *  stream, object, plain), each with the property kind, a JMSType, a JMSCorrelationID and a
 *  JMSXUserID; prints
 *  SENT 6. receive: READY once its consumer is open, then n messages, one line each describing what arrived (its class, its body, its
 *  JMSType, correlation id and JMSXUserID), then RECEIVED n. */
public class JmsBodies {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsBodies::run, 120_000);
    }

    static Destination destination(Session session, String spec) throws JMSException {
        String name = spec.substring(spec.indexOf(':') + 1);
        return spec.startsWith("topic:") ? session.createTopic(name) : session.createQueue(name);
    }

    static void run(String[] args) throws Exception {
        Connection connection = JmsProgram.connect(args[0]);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Destination dest = destination(session, args[2]);
        if (args[1].equals("send")) {
            MessageProducer producer = session.createProducer(dest);
            TextMessage text = session.createTextMessage("h\u00e9llo \u2713");
            BytesMessage bytes = session.createBytesMessage();
            bytes.writeBytes(new byte[] {0, 1, 2, (byte) 255, 'e', 'n', 'd'});
            MapMessage map = session.createMapMessage();
            map.setString("name", "petrel");
            map.setInt("n", 42);
            map.setLong("big", 1L << 40);
            map.setDouble("ratio", 2.5);
            map.setBoolean("flag", true);
            map.setBytes("raw", new byte[] {1, 2, 3});
            StreamMessage stream = session.createStreamMessage();
            stream.writeString("s");
            stream.writeLong(7L);
            stream.writeInt(-3);
            stream.writeBoolean(false);
            ObjectMessage object = session.createObjectMessage("an object");
            Message plain = session.createMessage();
            Message[] all = {text, bytes, map, stream, object, plain};
            String[] kinds = {"text", "bytes", "map", "stream", "object", "plain"};
            for (int i = 0; i < all.length; i++) {
                all[i].setStringProperty("kind", kinds[i]);
                all[i].setJMSType("type-" + kinds[i]);
                all[i].setJMSCorrelationID("corr-" + kinds[i]);
                all[i].setStringProperty("JMSXUserID", "user-" + kinds[i]);
                producer.send(all[i]);
            }
            System.out.println("SENT " + all.length);
        } else {
            int n = Integer.parseInt(args[3]);
            MessageConsumer consumer = session.createConsumer(dest);
            System.out.println("READY");
            System.out.flush();
            int got = 0;
            for (; got < n; got++) {
                Message m = consumer.receive(15000);
                if (m == null) break;
                System.out.println(describe(m) + " type=" + m.getJMSType() + " corr=" + m.getJMSCorrelationID()
                        + " user=" + m.getStringProperty("JMSXUserID") + " kind=" + m.getStringProperty("kind"));
            }
            System.out.println("RECEIVED " + got);
        }
        connection.close();
    }

    static String describe(Message m) throws JMSException {
        if (m instanceof TextMessage) {
            return "TEXT " + ((TextMessage) m).getText();
        }
        if (m instanceof BytesMessage) {
            BytesMessage b = (BytesMessage) m;
            byte[] got = new byte[(int) b.getBodyLength()];
            b.readBytes(got);
            return "BYTES " + Arrays.toString(got);
        }
        if (m instanceof MapMessage) {
            MapMessage mm = (MapMessage) m;
            List<String> names = new ArrayList<>();
            for (Enumeration<?> e = mm.getMapNames(); e.hasMoreElements(); ) names.add((String) e.nextElement());
            Collections.sort(names);
            StringBuilder sb = new StringBuilder("MAP");
            for (String name : names) {
                Object v = mm.getObject(name);
                String shown = v instanceof byte[] ? Arrays.toString((byte[]) v) : String.valueOf(v);
                sb.append(' ').append(name).append('=').append(shown).append(':')
                        .append(v == null ? "null" : v.getClass().getSimpleName());
            }
            return sb.toString();
        }
        if (m instanceof StreamMessage) {
            StreamMessage sm = (StreamMessage) m;
            StringBuilder sb = new StringBuilder("STREAM");
            try {
                while (true) {
                    Object v = sm.readObject();
                    sb.append(' ').append(v).append(':').append(v == null ? "null" : v.getClass().getSimpleName());
                }
            } catch (MessageEOFException end) {
                return sb.toString();
            }
        }
        if (m instanceof ObjectMessage) {
            return "OBJECT " + ((ObjectMessage) m).getObject();
        }
        return "PLAIN";
    }
}

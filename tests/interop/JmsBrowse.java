import java.util.Enumeration;
import javax.jms.*;

/** A QueueBrowser: args url queue count [batch [keep]]. Sends count persistent text messages
 *  (property index; with batch, from a transacted session committing every batch messages),
 *  browses them all (BROWSED n, in order: ORDERED true|false), browses with a selector
 *  (SELECTED n for index < 3), then, unless keep, receives them all (RECEIVED n: browsing
 *  consumed nothing) and browses the empty queue (EMPTY n). */
public class JmsBrowse {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsBrowse::run);
    }

    static int browse(Session session, Queue queue, String selector, boolean[] ordered) throws JMSException {
        QueueBrowser browser = selector == null ? session.createBrowser(queue) : session.createBrowser(queue, selector);
        Enumeration<?> e = browser.getEnumeration();
        int n = 0;
        while (e.hasMoreElements()) {
            Message m = (Message) e.nextElement();
            if (ordered != null && m.getIntProperty("index") != n) ordered[0] = false;
            n++;
        }
        browser.close();
        return n;
    }

    static void run(String[] args) throws Exception {
        String url = args[0], name = args[1];
        int count = Integer.parseInt(args[2]);
        Connection connection = JmsProgram.connect(url);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue(name);
        int batch = args.length > 3 ? Integer.parseInt(args[3]) : 0;
        Session sending = batch > 0 ? connection.createSession(true, Session.SESSION_TRANSACTED) : session;
        MessageProducer producer = sending.createProducer(queue);
        for (int i = 0; i < count; i++) {
            TextMessage m = sending.createTextMessage("browse " + i);
            m.setIntProperty("index", i);
            producer.send(m);
            if (batch > 0 && (i + 1) % batch == 0) sending.commit();
        }
        if (batch > 0) sending.commit();
        boolean[] ordered = {true};
        System.out.println("BROWSED " + browse(session, queue, null, ordered));
        System.out.println("ORDERED " + ordered[0]);
        System.out.println("SELECTED " + browse(session, queue, "index < 3", null));
        if (args.length > 4 && args[4].equals("keep")) {
            connection.close();
            return;
        }
        MessageConsumer consumer = session.createConsumer(queue);
        int got = 0;
        while (got < count && consumer.receive(10000) != null) got++;
        consumer.close();
        System.out.println("RECEIVED " + got);
        System.out.println("EMPTY " + browse(session, queue, null, null));
        connection.close();
    }
}

import java.util.*;
import javax.jms.*;

/** ActiveMQ's wildcard and composite destinations: args url. Topic consumers on prices.>,
 *  prices.*.eu and prices.stock.eu; messages to prices.stock.eu, prices.stock.us, prices,
 *  prices.bond.eu.long and other.thing. Prints, per consumer, the destinations it got (sorted):
 *  ANY ..., STAR ..., EXACT .... Then a composite send to "queue://comp.a,queue://comp.b,topic://comp.t"
 *  and to the queues "comp.c,comp.d": COMPOSITE name=count for each. */
public class JmsWildcards {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsWildcards::run);
    }

    static String drain(MessageConsumer consumer, int wait) throws JMSException {
        List<String> got = new ArrayList<>();
        Message m;
        while ((m = consumer.receive(wait)) != null) got.add(((Topic) m.getJMSDestination()).getTopicName());
        Collections.sort(got);
        return String.join(" ", got);
    }

    static void run(String[] args) throws Exception {
        Connection connection = JmsProgram.connect(args[0]);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer any = session.createConsumer(session.createTopic("prices.>"));
        MessageConsumer star = session.createConsumer(session.createTopic("prices.*.eu"));
        MessageConsumer exact = session.createConsumer(session.createTopic("prices.stock.eu"));
        MessageProducer producer = session.createProducer(null);
        for (String name : new String[] {"prices.stock.eu", "prices.stock.us", "prices.bond.eu.long", "other.thing", "prices"}) {
            producer.send(session.createTopic(name), session.createTextMessage(name));
        }
        System.out.println("ANY " + drain(any, 3000));
        System.out.println("STAR " + drain(star, 1000));
        System.out.println("EXACT " + drain(exact, 1000));

        MessageConsumer topic = session.createConsumer(session.createTopic("comp.t"));
        producer.send(session.createQueue("queue://comp.a,queue://comp.b,topic://comp.t"),
                      session.createTextMessage("to three"));
        producer.send(session.createQueue("comp.c,comp.d"), session.createTextMessage("to two"));
        for (String name : new String[] {"comp.a", "comp.b", "comp.c", "comp.d"}) {
            MessageConsumer q = session.createConsumer(session.createQueue(name));
            int n = 0;
            while (q.receive(n == 0 ? 5000 : 500) != null) n++;
            q.close();
            System.out.println("COMPOSITE " + name + "=" + n);
        }
        int n = 0;
        while (topic.receive(n == 0 ? 5000 : 500) != null) n++;
        System.out.println("COMPOSITE comp.t=" + n);
        connection.close();
    }
}

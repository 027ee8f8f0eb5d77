import javax.jms.*;

/** Composite destinations on a consumer, as ActiveMQ spells them: args url prefix. Prints BOTH
 *  (a consumer on queue "p.a,p.b" gets what is on each), MIXED (one on
 *  "queue://p.c,topic://p.t": a queue's message and a topic's), WILD (a composite part may be a
 *  wildcard: "p.w.>,p.x"), SENT (a composite send to "p.d,p.e" reaches a composite consumer of
 *  both twice, once per queue, client-acknowledged) and LEFT null (nothing is left). */
public class JmsCompositeConsumers {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsCompositeConsumers::run, 90000);
    }


    static void run(String[] args) throws Exception {
        String url = args[0], p = args[1];
        Connection connection = JmsProgram.connect(url);
        connection.start();
        Session s = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer out = s.createProducer(null);
        out.send(s.createQueue(p + ".a"), s.createTextMessage("a1"));
        out.send(s.createQueue(p + ".b"), s.createTextMessage("b1"));
        MessageConsumer both = s.createConsumer(s.createQueue(p + ".a," + p + ".b"));
        System.out.println("BOTH " + JmsProgram.receiveSorted(both, 2));
        both.close();
        MessageConsumer mixed = s.createConsumer(s.createQueue("queue://" + p + ".c,topic://" + p + ".t"));
        out.send(s.createQueue(p + ".c"), s.createTextMessage("c1"));
        out.send(s.createTopic(p + ".t"), s.createTextMessage("t1"));
        System.out.println("MIXED " + JmsProgram.receiveSorted(mixed, 2));
        mixed.close();
        out.send(s.createQueue(p + ".w.one"), s.createTextMessage("w1"));
        out.send(s.createQueue(p + ".x"), s.createTextMessage("x1"));
        MessageConsumer wild = s.createConsumer(s.createQueue(p + ".w.>," + p + ".x"));
        System.out.println("WILD " + JmsProgram.receiveSorted(wild, 2));
        wild.close();
        Session acking = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        s.createProducer(s.createQueue(p + ".d," + p + ".e")).send(s.createTextMessage("s1"));
        MessageConsumer sent = acking.createConsumer(acking.createQueue(p + ".d," + p + ".e"));
        Message first = sent.receive(10000), second = sent.receive(10000);
        if (second != null) second.acknowledge();
        System.out.println("SENT " + JmsProgram.text(first) + " " + JmsProgram.text(second));
        sent.close();
        MessageConsumer left = s.createConsumer(s.createQueue(p + ".a," + p + ".b," + p + ".c," + p + ".d," + p + ".e"));
        System.out.println("LEFT " + JmsProgram.text(left.receive(500)));
        connection.close();
    }
}

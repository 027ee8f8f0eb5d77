import javax.jms.*;

/** Wildcard queue consumers as ActiveMQ spells them: args url prefix. Prints EXISTING (what a
 *  consumer on queue prefix.&gt; gets from queues that existed before it), FUTURE (from queues
 *  created after it), STAR (a consumer on prefix.*.eu: the matching queue's message, then null:
 *  not another word count), MANY n (30 messages over two queues, client-acknowledged in one ack
 *  at the end: the prefetch is shared) and LEFT null (nothing is left on the matching queues; the
 *  message on a queue outside the pattern is never received: OTHER x1 at the end). */
public class JmsQueueWildcards {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsQueueWildcards::run, 90000);
    }


    static void send(Session s, MessageProducer p, String queue, String text) throws JMSException {
        p.send(s.createQueue(queue), s.createTextMessage(text));
    }

    static void run(String[] args) throws Exception {
        String url = args[0], pre = args[1];
        Connection connection = JmsProgram.connect(url);
        connection.start();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer p = session.createProducer(null);
        send(session, p, pre + ".a", "a1");
        send(session, p, pre + ".b.eu", "b1");
        send(session, p, pre + "x.a", "x1");
        MessageConsumer all = session.createConsumer(session.createQueue(pre + ".>"));
        System.out.println("EXISTING " + JmsProgram.receiveSorted(all, 2));
        send(session, p, pre + ".c", "c1");
        send(session, p, pre + ".d.eu", "d1");
        System.out.println("FUTURE " + JmsProgram.receiveSorted(all, 2));
        all.close();
        MessageConsumer star = session.createConsumer(session.createQueue(pre + ".*.eu"));
        send(session, p, pre + ".e.eu", "e1");
        send(session, p, pre + "x.e.eu", "f1");
        System.out.println("STAR " + JmsProgram.text(star.receive(10000)) + " " + JmsProgram.text(star.receive(500)));
        star.close();
        Session acking = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        for (int i = 0; i < 30; i++) send(session, p, pre + (i % 2 == 0 ? ".a" : ".b.eu"), "m" + i);
        MessageConsumer many = acking.createConsumer(acking.createQueue(pre + ".>"));
        int got = 0;
        Message last = null;
        while (got < 30) {
            Message m = many.receive(10000);
            if (m == null) break;
            last = m;
            got++;
        }
        if (last != null) last.acknowledge();
        System.out.println("MANY " + got);
        many.close();
        MessageConsumer again = session.createConsumer(session.createQueue(pre + ".>"));
        System.out.println("LEFT " + JmsProgram.text(again.receive(500)));
        MessageConsumer other = session.createConsumer(session.createQueue(pre + "x.>"));
        System.out.println("OTHER " + JmsProgram.receiveSorted(other, 2));
        connection.close();
    }
}

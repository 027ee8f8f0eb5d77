import javax.jms.*;

/** Sends to a wildcard destination: args url prefix. Makes queues p.a and p.b and topic
 *  subscribers on p.ta and p.tb, sends "q" to queue p.&gt; and "t" to topic p.t*, then prints
 *  SENT ok or SENT refused: its error, and what each of them received (null: nothing). */
public class JmsWildcardSend {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsWildcardSend::run, 60000);
    }


    static void run(String[] args) throws Exception {
        String url = args[0], p = args[1];
        Connection connection = JmsProgram.connect(url);
        connection.start();
        Session s = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer a = s.createConsumer(s.createQueue(p + ".a"));
        MessageConsumer b = s.createConsumer(s.createQueue(p + ".b"));
        MessageConsumer ta = s.createConsumer(s.createTopic(p + ".ta"));
        MessageConsumer tb = s.createConsumer(s.createTopic(p + ".tb"));
        MessageProducer out = s.createProducer(null);
        for (Destination d : new Destination[] {s.createQueue(p + ".>"), s.createTopic(p + ".*")}) {
            try {
                out.send(d, s.createTextMessage(d instanceof Queue ? "q" : "t"));
                System.out.println("SENT ok");
            } catch (JMSException e) {
                System.out.println("SENT refused");
            }
        }
        System.out.println("QUEUES " + JmsProgram.text(a.receive(1000)) + " " + JmsProgram.text(b.receive(500)));
        System.out.println("TOPICS " + JmsProgram.text(ta.receive(1000)) + " " + JmsProgram.text(tb.receive(500)));
        connection.close();
    }
}

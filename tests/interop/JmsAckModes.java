import java.util.ArrayList;
import java.util.List;
import javax.jms.*;
import org.apache.activemq.ActiveMQSession;

/** Individual and dups-ok acknowledgement: args url queue. Ten messages (property index):
 *  an INDIVIDUAL_ACKNOWLEDGE session receives them all and acknowledges the even ones only, then
 *  closes; another receives what is left: INDIVIDUAL left... (the odd ones, redelivered). A
 *  DUPS_OK_ACKNOWLEDGE session receives ten more and closes: DUPSOK n, then LEFT n. */
public class JmsAckModes {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsAckModes::run);
    }

    static void send(Session session, Queue queue, int count) throws JMSException {
        MessageProducer producer = session.createProducer(queue);
        for (int i = 0; i < count; i++) {
            Message m = session.createTextMessage("m" + i);
            m.setIntProperty("index", i);
            producer.send(m);
        }
        producer.close();
    }

    static void run(String[] args) throws Exception {
        String name = args[1];
        Connection connection = JmsProgram.connect(args[0]);
        Session individual = connection.createSession(false, ActiveMQSession.INDIVIDUAL_ACKNOWLEDGE);
        Queue queue = individual.createQueue(name);
        send(individual, queue, 10);
        MessageConsumer consumer = individual.createConsumer(queue);
        for (int i = 0; i < 10; i++) {
            Message m = consumer.receive(10000);
            if (m.getIntProperty("index") % 2 == 0) m.acknowledge();
        }
        consumer.close();
        individual.close();
        Session plain = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer rest = plain.createConsumer(queue);
        List<String> left = new ArrayList<>();
        Message m;
        while ((m = rest.receive(2000)) != null) left.add(m.getIntProperty("index") + (m.getJMSRedelivered() ? "r" : ""));
        rest.close();
        System.out.println("INDIVIDUAL " + String.join(" ", left));

        Session dupsOk = connection.createSession(false, Session.DUPS_OK_ACKNOWLEDGE);
        send(dupsOk, queue, 10);
        MessageConsumer lazy = dupsOk.createConsumer(queue);
        int got = 0;
        while (got < 10 && lazy.receive(10000) != null) got++;
        lazy.close();
        dupsOk.close();
        System.out.println("DUPSOK " + got);
        MessageConsumer again = plain.createConsumer(queue);
        int after = 0;
        while (again.receive(2000) != null) after++;
        System.out.println("LEFT " + after);
        connection.close();
    }
}

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import javax.jms.*;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.apache.activemq.ActiveMQXAConnectionFactory;

/** XA through ActiveMQ's XAResource, as a transaction manager drives it. One step per run:
 *    fill url queue count                        count persistent messages "in-i"
 *    branch url in out count gtrid how           one branch takes count messages from in and sends count
 *                                                to out, ends, then how: commit2 (prepare, commit),
 *                                                commit1 (one phase), rollback2 (prepare, rollback),
 *                                                rollback1 (rollback unprepared), prepare (and leave)
 *    recover url gtrid how                       recover() on a new connection, then commit or rollback
 *                                                the branch of gtrid (how: commit, rollback, none)
 *    drain url queue                             receive what is there
 *  Prints one line a fact. */
public class JmsXa {
    static final int FORMAT = 0x50455452; // "PETR"

    static final class Branch implements Xid {
        final byte[] gtrid;
        final byte[] bqual;

        Branch(String gtrid) {
            this.gtrid = gtrid.getBytes(StandardCharsets.UTF_8);
            this.bqual = ("b-" + gtrid).getBytes(StandardCharsets.UTF_8);
        }

        public int getFormatId() {
            return FORMAT;
        }

        public byte[] getGlobalTransactionId() {
            return gtrid;
        }

        public byte[] getBranchQualifier() {
            return bqual;
        }
    }

    public static void main(String[] args) {
        JmsProgram.main(args, JmsXa::run, 120_000);
    }

    static void run(String[] args) throws Exception {
        switch (args[0]) {
            case "fill": fill(args[1], args[2], Integer.parseInt(args[3])); break;
            case "branch": branch(args[1], args[2], args[3], Integer.parseInt(args[4]), args[5], args[6]); break;
            case "recover": recover(args[1], args[2], args[3]); break;
            case "drain": drain(args[1], args[2]); break;
            default: throw new IllegalArgumentException(args[0]);
        }
    }

    static void fill(String url, String queueName, int count) throws JMSException {
        Connection connection = JmsProgram.connect(url);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(session.createQueue(queueName));
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        for (int i = 0; i < count; i++) producer.send(session.createTextMessage("in-" + i));
        System.out.println("FILLED " + count);
        connection.close();
    }

    static void branch(String url, String in, String out, int count, String gtrid, String how) throws Exception {
        XAConnection connection = new ActiveMQXAConnectionFactory(url).createXAConnection();
        connection.start();
        XASession session = connection.createXASession();
        XAResource resource = session.getXAResource();
        Xid xid = new Branch(gtrid);
        MessageConsumer consumer = session.createConsumer(session.createQueue(in));
        MessageProducer producer = session.createProducer(session.createQueue(out));
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        resource.start(xid, XAResource.TMNOFLAGS);
        StringBuilder took = new StringBuilder();
        for (int i = 0; i < count; i++) {
            TextMessage m = (TextMessage) consumer.receive(10000);
            if (m == null) throw new java.lang.IllegalStateException("only " + i + " messages to take");
            took.append(' ').append(m.getText());
            producer.send(session.createTextMessage("out-" + gtrid + "-" + i));
        }
        resource.end(xid, XAResource.TMSUCCESS);
        System.out.println("TOOK" + took);
        switch (how) {
            case "commit2":
                System.out.println("VOTE " + vote(resource.prepare(xid)));
                resource.commit(xid, false);
                break;
            case "commit1":
                resource.commit(xid, true);
                break;
            case "rollback2":
                System.out.println("VOTE " + vote(resource.prepare(xid)));
                resource.rollback(xid);
                break;
            case "rollback1":
                resource.rollback(xid);
                break;
            case "prepare":
                System.out.println("VOTE " + vote(resource.prepare(xid)));
                break;
            default:
                throw new IllegalArgumentException(how);
        }
        System.out.println("DONE " + how);
        connection.close();
    }

    static String vote(int v) {
        return v == XAResource.XA_OK ? "XA_OK" : v == XAResource.XA_RDONLY ? "XA_RDONLY" : String.valueOf(v);
    }

    static void recover(String url, String gtrid, String how) throws Exception {
        XAConnection connection = new ActiveMQXAConnectionFactory(url).createXAConnection();
        connection.start();
        XAResource resource = connection.createXASession().getXAResource();
        Xid[] found = resource.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
        Xid mine = null;
        StringBuilder listed = new StringBuilder();
        for (Xid xid : found) {
            if (xid.getFormatId() != FORMAT) continue;
            String g = new String(xid.getGlobalTransactionId(), StandardCharsets.UTF_8);
            listed.append(' ').append(g);
            if (g.equals(gtrid) && Arrays.equals(xid.getBranchQualifier(), new Branch(gtrid).bqual)) mine = xid;
        }
        System.out.println("RECOVERED" + listed);
        if (how.equals("commit") && mine != null) {
            resource.commit(mine, false);
            System.out.println("COMMITTED " + gtrid);
        } else if (how.equals("rollback") && mine != null) {
            resource.rollback(mine);
            System.out.println("ROLLED BACK " + gtrid);
        }
        if (how.equals("commit-unknown")) {
            try {
                resource.commit(new Branch(gtrid), false);
                System.out.println("COMMITTED " + gtrid);
            } catch (XAException e) {
                System.out.println("XAEXCEPTION");
            }
        }
        connection.close();
    }

    static void drain(String url, String queueName) throws JMSException {
        Connection connection = JmsProgram.connect(url);
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = session.createConsumer(session.createQueue(queueName));
        int got = 0;
        StringBuilder texts = new StringBuilder();
        for (Message m; (m = consumer.receive(got == 0 ? 3000 : 1500)) != null; got++) {
            texts.append(' ').append(((TextMessage) m).getText()).append(m.getJMSRedelivered() ? "*" : "");
        }
        System.out.println("DRAINED " + got + texts);
        connection.close();
    }
}

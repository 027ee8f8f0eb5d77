import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicInteger;
import javax.jms.BytesMessage;
import javax.jms.DeliveryMode;
import javax.jms.Destination;
import javax.jms.JMSException;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Session;
import javax.jms.Topic;
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.ActiveMQSession;
import org.apache.activemq.transport.TransportListener;

/**
 * The chaos harness's OpenWire clients (petrel.testing.chaos.openwire_channels): one JVM holds
 * every JMS connection of a run, each driven by a thread of its own, and speaks lines on
 * stdin/stdout. A request is "CHANNEL SEQ VERB ARGS..."; its answer is "CHANNEL SEQ OK ..." or
 * "CHANNEL SEQ ERR text". Verbs:
 *
 *   OPEN P|C URL DESTINATION MODE CLIENT_ID SUBSCRIPTION USER PASSWORD   ("-" for none)
 *   SEND MID,SIZE,DURABLE,PRIORITY,GROUP,DUPLICATE_ID;...   -> OK, or OK RESENT (see below)
 *   RECV MILLIS        -> OK MSG MID REDELIVERED(0|1), or OK NONE
 *   ACK                -> the deliveries since the last ACK acknowledged (client, individual, commit)
 *   CLOSE              -> the connection closed
 *   ABORT              -> the connection's transport stopped at once (no goodbye), answered at once
 *
 * Unasked, a channel says "CHANNEL * FAILOVER interrupted" and "CHANNEL * FAILOVER resumed to
 * ADDRESS" as its failover transport loses its broker and reconnects.
 *
 * A URL is a failover: URL. Sends are synchronous (alwaysSyncSend) and acknowledgements too
 * (sendAcksAsync off), so an OK is the broker's response. A failover in the middle of a send
 * makes the transport replay it: its answer says RESENT (on another node it may be a copy). An
 * ACK is refused when a failover came between the deliveries and the acknowledgement, or during
 * it: the client's delivered list was reset, so what it acknowledged is not known.
 */
public final class ChaosJms {
    private static final PrintStream OUT =
            new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    private static final Map<String, Channel> CHANNELS = new ConcurrentHashMap<>();

    private ChaosJms() {
    }

    static void answer(String channel, String seq, String text) {
        synchronized (OUT) {
            OUT.println(channel + " " + seq + " " + text.replace('\n', ' ').replace('\r', ' '));
            OUT.flush();
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ");
            if (f.length < 3) {
                continue;
            }
            String id = f[0];
            String verb = f[2];
            if (verb.equals("OPEN")) {
                Channel c = new Channel(id);
                CHANNELS.put(id, c);
                c.start();
                c.requests.add(f);
            } else if (verb.equals("ABORT")) {
                Channel c = CHANNELS.remove(id);
                if (c != null) {
                    c.abort();
                }
                answer(id, f[1], "OK");
            } else {
                Channel c = CHANNELS.get(id);
                if (c == null) {
                    answer(id, f[1], "ERR no channel " + id);
                } else {
                    c.requests.add(f);
                }
            }
        }
        System.exit(0); // stdin closed: the harness is gone
    }

    static final class Channel extends Thread implements TransportListener {
        final String id;
        final BlockingQueue<String[]> requests = new LinkedBlockingQueue<>();
        final AtomicInteger failovers = new AtomicInteger();
        volatile boolean interrupted;
        volatile boolean aborted;
        volatile ActiveMQConnection connection;
        Session session;
        MessageProducer producer;
        MessageConsumer consumer;
        String mode = "";
        final List<Message> pending = new ArrayList<>();
        int pendingSince = -1; // failovers when the oldest pending delivery came

        Channel(String id) {
            super("chaos-" + id);
            this.id = id;
            setDaemon(true);
        }

        @Override
        public void run() {
            while (!aborted) {
                String[] f;
                try {
                    f = requests.take();
                } catch (InterruptedException e) {
                    return;
                }
                String seq = f[1];
                String verb = f[2];
                try {
                    String out;
                    switch (verb) {
                        case "OPEN": out = open(f); break;
                        case "SEND": out = send(f.length > 3 ? f[3] : ""); break;
                        case "RECV": out = receive(Long.parseLong(f[3])); break;
                        case "ACK": out = ack(); break;
                        case "CLOSE": close(); answer(id, seq, "OK"); CHANNELS.remove(id); return;
                        default: out = "ERR unknown verb " + verb;
                    }
                    if (!aborted) {
                        answer(id, seq, out);
                    }
                } catch (Throwable e) {
                    if (!aborted) {
                        answer(id, seq, "ERR " + e);
                    }
                }
            }
        }

        String open(String[] f) throws JMSException {
            boolean producing = f[3].equals("P");
            String url = f[4];
            String dest = f[5];
            mode = f[6];
            String clientId = f[7];
            String subscription = f[8];
            ActiveMQConnectionFactory factory = f[9].equals("-")
                    ? new ActiveMQConnectionFactory(url) : new ActiveMQConnectionFactory(f[9], f[10], url);
            factory.setAlwaysSyncSend(true);
            factory.setSendAcksAsync(false);
            factory.setWatchTopicAdvisories(false);
            factory.getPrefetchPolicy().setAll(50);
            ActiveMQConnection c = (ActiveMQConnection) factory.createConnection();
            connection = c;
            c.addTransportListener(this);
            if (!clientId.equals("-")) {
                c.setClientID(clientId);
            }
            c.start();
            boolean transacted = mode.equals("transacted");
            int ack = Session.AUTO_ACKNOWLEDGE;
            if (mode.equals("client")) {
                ack = Session.CLIENT_ACKNOWLEDGE;
            } else if (mode.equals("client-individual")) {
                ack = ActiveMQSession.INDIVIDUAL_ACKNOWLEDGE;
            }
            session = c.createSession(transacted, transacted ? Session.SESSION_TRANSACTED : ack);
            Destination d = dest.startsWith("topic://")
                    ? session.createTopic(dest.substring(8)) : session.createQueue(dest.substring(dest.indexOf("://") + 3));
            if (producing) {
                producer = session.createProducer(d);
            } else if (!subscription.equals("-")) {
                consumer = session.createDurableSubscriber((Topic) d, subscription);
            } else {
                consumer = session.createConsumer(d);
            }
            return "OK";
        }

        String send(String specs) throws JMSException {
            int before = failovers.get();
            for (String spec : specs.split(";")) {
                String[] s = spec.split(",");
                String mid = s[0];
                int size = Integer.parseInt(s[1]);
                byte[] body = new byte[Math.max(size, mid.length() + 1)];
                java.util.Arrays.fill(body, (byte) 'x');
                byte[] head = (mid + "|").getBytes(StandardCharsets.US_ASCII);
                System.arraycopy(head, 0, body, 0, head.length);
                BytesMessage m = session.createBytesMessage();
                m.writeBytes(body);
                if (!s[4].equals("-")) {
                    m.setStringProperty("JMSXGroupID", s[4]);
                }
                if (!s[5].equals("-")) {
                    m.setStringProperty("_AMQ_DUPL_ID", s[5]);
                }
                int priority = s[3].equals("-") ? Message.DEFAULT_PRIORITY : Integer.parseInt(s[3]);
                int delivery = s[2].equals("1") ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT;
                producer.send(m, delivery, priority, Message.DEFAULT_TIME_TO_LIVE);
            }
            if (session.getTransacted()) {
                session.commit();
            }
            return failovers.get() != before || interrupted ? "OK RESENT" : "OK";
        }

        String receive(long millis) throws JMSException {
            Message m = consumer.receive(millis);
            if (m == null) {
                return "OK NONE";
            }
            byte[] head = new byte[64];
            int n = ((BytesMessage) m).readBytes(head);
            String text = new String(head, 0, Math.max(n, 0), StandardCharsets.US_ASCII);
            int bar = text.indexOf('|');
            String mid = bar < 0 ? text : text.substring(0, bar);
            if (!mode.equals("auto")) {
                if (pending.isEmpty()) {
                    pendingSince = failovers.get();
                }
                pending.add(m);
            }
            return "OK MSG " + mid + " " + (m.getJMSRedelivered() ? 1 : 0);
        }

        String ack() throws JMSException {
            if (pending.isEmpty()) {
                return "OK";
            }
            int before = failovers.get();
            if (before != pendingSince || interrupted) {
                pending.clear();
                return "ERR a failover since the deliveries: their acknowledgement is in doubt";
            }
            if (mode.equals("transacted")) {
                session.commit();
            } else if (mode.equals("client-individual")) {
                for (Message m : pending) {
                    m.acknowledge();
                }
            } else {
                pending.get(pending.size() - 1).acknowledge();
            }
            pending.clear();
            if (failovers.get() != before || interrupted) {
                return "ERR a failover during the acknowledgement: it is in doubt";
            }
            return "OK";
        }

        void close() {
            ActiveMQConnection c = connection;
            if (c == null) {
                return;
            }
            Thread closer = new Thread(() -> {
                try {
                    c.close();
                } catch (Throwable ignored) {
                    // going away anyway
                }
            });
            closer.setDaemon(true);
            closer.start();
            try {
                closer.join(10000);
            } catch (InterruptedException ignored) {
                // fall through to the abort
            }
            if (closer.isAlive()) {
                abort();
            }
        }

        void abort() {
            aborted = true;
            ActiveMQConnection c = connection;
            if (c != null) {
                try {
                    c.getTransport().stop(); // the socket closed, no RemoveInfo nor ShutdownInfo
                } catch (Throwable ignored) {
                    // already down
                }
                Thread reaper = new Thread(() -> {
                    try {
                        c.close(); // the client's own threads; nothing reaches the broker any more
                    } catch (Throwable ignored) {
                        // expected: the transport is stopped
                    }
                });
                reaper.setDaemon(true);
                reaper.start();
            }
            interrupt();
        }

        @Override
        public void onCommand(Object command) {
        }

        @Override
        public void onException(java.io.IOException error) {
        }

        @Override
        public void transportInterupted() { // (sic: ActiveMQ's spelling)
            interrupted = true;
            failovers.incrementAndGet();
            if (!aborted) {
                answer(id, "*", "FAILOVER interrupted");
            }
        }

        @Override
        public void transportResumed() {
            interrupted = false;
            ActiveMQConnection c = connection;
            if (!aborted && c != null) {
                answer(id, "*", "FAILOVER resumed to " + c.getTransport().getRemoteAddress());
            }
        }
    }
}

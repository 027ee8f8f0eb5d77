import javax.jms.*;
import org.apache.activemq.command.*;
import org.apache.activemq.openwire.OpenWireFormat;
import org.apache.activemq.util.ByteSequence;

/** ActiveMQ's own marshaller writes the commands a JMS client and a broker exchange, every
 *  field set: args version(10..12) tight(true|false). Prints one line a command, "Class hex"
 *  (the frame with its size prefix), for tests/system/test_openwire_tight.py to read back. */
public class OpenWireFrames {
    public static void main(String[] args) {
        JmsProgram.main(args, OpenWireFrames::dump);
    }

    static void dump(String[] args) throws Exception {
        OpenWireFormat format = new OpenWireFormat(Integer.parseInt(args[0]));
        format.setTightEncodingEnabled(Boolean.parseBoolean(args[1]));
        ConnectionId connection = new ConnectionId("ID:c-1");
        SessionId session = new SessionId(connection, 1);
        ProducerId producer = new ProducerId(session, 2);
        ConsumerId consumer = new ConsumerId(session, 3);
        ActiveMQQueue queue = new ActiveMQQueue("orders");
        MessageId id = new MessageId(producer, 7);
        ActiveMQTextMessage text = new ActiveMQTextMessage();
        text.setProducerId(producer);
        text.setDestination(queue);
        text.setMessageId(id);
        text.setPersistent(true);
        text.setText("h\u00e9llo");
        text.setTimestamp(1700000000000L);
        text.setCommandId(5);
        text.setResponseRequired(true);
        text.setIntProperty("i", 3);
        text.setJMSReplyTo(new ActiveMQTopic("replies"));
        text.setJMSXGroupFirstForConsumer(true);
        text.setBrokerInTime(70000);
        text.setBrokerOutTime(1L << 40);
        ActiveMQBytesMessage bytes = new ActiveMQBytesMessage();
        bytes.setDestination(queue);
        bytes.writeBytes(new byte[] {0, 1, -1});
        bytes.reset();  // (the body stored as content, as a send does)
        bytes.setExpiration(-1);
        ConnectionInfo info = new ConnectionInfo(connection);
        info.setClientId("client");
        info.setUserName("u");
        info.setFaultTolerant(true);
        info.setClientIp("1.2.3.4");
        ConsumerInfo subscriber = new ConsumerInfo(consumer);
        subscriber.setDestination(queue);
        subscriber.setPrefetchSize(1000);
        subscriber.setSelector("a > 1");
        subscriber.setSubscriptionName("durable");
        subscriber.setNoRangeAcks(true);
        ProducerInfo sender = new ProducerInfo(producer);
        sender.setDestination(queue);
        sender.setWindowSize(1024);
        MessageAck ack = new MessageAck(text, MessageAck.STANDARD_ACK_TYPE, 1);
        ack.setConsumerId(consumer);
        ack.setPoisonCause(new Throwable("why"));
        MessageDispatch dispatch = new MessageDispatch();
        dispatch.setConsumerId(consumer);
        dispatch.setDestination(queue);
        dispatch.setMessage(text);
        dispatch.setRedeliveryCounter(2);
        ConnectionControl control = new ConnectionControl();
        control.setFaultTolerant(true);
        control.setConnectedBrokers("tcp://a:1");
        control.setReconnectTo("tcp://b:2");
        control.setRebalanceConnection(true);
        control.setToken(new byte[] {1, 2});
        BrokerInfo broker = new BrokerInfo();
        broker.setBrokerId(new BrokerId("b1"));
        broker.setBrokerName("n");
        broker.setBrokerURL("tcp://x:1");
        broker.setPeerBrokerInfos(new BrokerInfo[] {new BrokerInfo()});
        broker.setConnectionId(9);
        MessagePull pull = new MessagePull();
        pull.setConsumerId(consumer);
        pull.setDestination(queue);
        pull.setTimeout(5000);
        pull.setCorrelationId("cor");
        pull.setMessageId(id);
        ConsumerControl consumerControl = new ConsumerControl();
        consumerControl.setConsumerId(consumer);
        consumerControl.setPrefetch(10);
        consumerControl.setStart(true);
        RemoveInfo remove = new RemoveInfo(consumer);
        remove.setLastDeliveredSequenceId(42);
        ExceptionResponse refusal = new ExceptionResponse(new JMSException("no"));
        refusal.setCorrelationId(3);
        XATransactionId xid = new XATransactionId();
        xid.setFormatId(0x1234);
        xid.setGlobalTransactionId(new byte[] {1, 2, 3});
        xid.setBranchQualifier(new byte[] {4});
        Object[] commands = {
            info, new SessionInfo(session), sender, subscriber, text, bytes, ack, dispatch, control, broker, pull,
            consumerControl, remove,
            new DestinationInfo(connection, DestinationInfo.ADD_OPERATION_TYPE, new ActiveMQTempQueue("ID:c-1:1:1")),
            new ProducerAck(producer, 1100), refusal, new Response(),
            new TransactionInfo(connection, new LocalTransactionId(connection, 4), TransactionInfo.BEGIN),
            new TransactionInfo(connection, xid, TransactionInfo.PREPARE), new KeepAliveInfo(), new ShutdownInfo(),
            new RemoveSubscriptionInfo(), new ConnectionError(), new ControlCommand(), new FlushCommand(),
        };
        for (Object command : commands) {
            ByteSequence frame = format.marshal(command);
            StringBuilder hex = new StringBuilder();
            for (int i = frame.offset; i < frame.offset + frame.length; i++) {
                hex.append(String.format("%02x", frame.data[i]));
            }
            System.out.println(command.getClass().getSimpleName() + " " + hex);
        }
    }
}

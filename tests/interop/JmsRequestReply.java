import javax.jms.*;

/** Request/reply through a temporary queue: args url serviceQueue count. A responder session
 *  answers each request on its JMSReplyTo with the request's text in upper case and its
 *  JMSCorrelationID; the requester checks each reply. Prints REPLIES n. */
public class JmsRequestReply {
    public static void main(String[] args) {
        JmsProgram.main(args, JmsRequestReply::run);
    }

    static void run(String[] args) throws Exception {
        String url = args[0], service = args[1];
        int count = Integer.parseInt(args[2]);
        Connection connection = JmsProgram.connect(url);
        Session responderSession = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer requests = responderSession.createConsumer(responderSession.createQueue(service));
        MessageProducer replier = responderSession.createProducer(null);
        requests.setMessageListener(request -> {
            try {
                TextMessage reply = responderSession.createTextMessage(((TextMessage) request).getText().toUpperCase());
                reply.setJMSCorrelationID(request.getJMSCorrelationID());
                replier.send(request.getJMSReplyTo(), reply);
            } catch (JMSException e) {
                e.printStackTrace();
            }
        });
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        TemporaryQueue replyTo = session.createTemporaryQueue();
        MessageConsumer replies = session.createConsumer(replyTo);
        MessageProducer producer = session.createProducer(session.createQueue(service));
        int ok = 0;
        for (int i = 0; i < count; i++) {
            TextMessage request = session.createTextMessage("request " + i);
            request.setJMSReplyTo(replyTo);
            request.setJMSCorrelationID("c" + i);
            producer.send(request);
            TextMessage reply = (TextMessage) replies.receive(10000);
            if (reply != null && reply.getText().equals("REQUEST " + i) && ("c" + i).equals(reply.getJMSCorrelationID())) ok++;
            else System.out.println("BAD " + i + " " + (reply == null ? "none" : reply.getText() + " " + reply.getJMSCorrelationID()));
        }
        System.out.println("REPLIES " + ok);
        replies.close();
        replyTo.delete();
        connection.close();
    }
}

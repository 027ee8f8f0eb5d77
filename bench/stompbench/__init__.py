"""stompbench: Petrel side by side with ActiveMQ and RabbitMQ over pipelined STOMP."""

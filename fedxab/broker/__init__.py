"""Transport: message codec, Broker interface, in-memory and Kafka brokers (agents issue)."""

-- The front tier: stateless gateways behind the load balancer. Each renames and filters, then
-- writes the records to Kafka keyed by service, so one service's records share a partition.
CREATE SOURCE edge FROM GRPC WITH (listen = '0.0.0.0:4317');

CREATE SINK by_service TO KAFKA WITH (
  brokers = 'kafka-0.kafka:9092,kafka-1.kafka:9092,kafka-2.kafka:9092',
  topic = 'otlp_{signal}',
  key = 'service',
  compression = 'zstd',
  acks = 'all'
);

CREATE PIPELINE front FROM edge AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  DELETE FROM logs WHERE severity_number < 9;
  INSERT INTO by_service SELECT * FROM logs;
  INSERT INTO by_service SELECT * FROM spans;
END;

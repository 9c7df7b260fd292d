-- The receiving end of the end-to-end benchmark: accepts OTLP and OTAP and acknowledges
-- every batch without routing it anywhere (rows are counted as unrouted).
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4417');
CREATE PIPELINE sink_hole FROM edge AS BEGIN
  DELETE FROM logs WHERE severity_number < 0;
END;

# Sourced by the benchmarks that run the Collector: RENAME_PROCESSOR is the transform
# processor (YAML, indented under `processors:`) that renames the log attribute
# `exception.type` to `error.type`, as the Penstock pipelines of the same benchmarks do.
RENAME_PROCESSOR='  transform:
    log_statements:
      - context: log
        statements:
          - set(log.attributes["error.type"], log.attributes["exception.type"]) where log.attributes["exception.type"] != nil
          - delete_key(log.attributes, "exception.type")'

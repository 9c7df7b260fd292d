# Sourced by benches/compare/run.sh: the work of each PIPELINE of the matrix, as the Penstock
# statements (penstock_statements NAME) and the Collector processors (collector_processors
# NAME: YAML indented under `processors:`, and collector_chain NAME: their names in order).
#   pass    nothing: every log goes on as it came
#   rename  rename `exception.type` to `error.type`
#   renames four renames
#   full    four renames, drop the logs below INFO (severity number < 9), send the rest on
#   guard   four renames, drop the logs below DEBUG (severity number < 5: none of the load
#           generator's), send the rest on
. benches/compare/rename.sh

penstock_statements() {
  case "$1" in
    pass) ;;
    rename) echo "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';" ;;
    renames)
      echo "ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';"
      echo "ALTER TABLE logs RENAME ATTRIBUTE 'http.request.method' TO 'http.method';"
      echo "ALTER TABLE logs RENAME ATTRIBUTE 'user.id' TO 'enduser.id';"
      echo "ALTER TABLE logs RENAME ATTRIBUTE 'thread.id' TO 'thread.num';"
      ;;
    full)
      penstock_statements renames
      echo "DELETE FROM logs WHERE severity_number < 9;"
      ;;
    guard)
      penstock_statements renames
      echo "DELETE FROM logs WHERE severity_number < 5;"
      ;;
    *) echo "unknown pipeline $1" >&2; return 1 ;;
  esac
}

# One OTTL rename: set the new key where the old one is, then delete the old one.
ottl_rename() {
  echo "          - set(log.attributes[\"$2\"], log.attributes[\"$1\"]) where log.attributes[\"$1\"] != nil"
  echo "          - delete_key(log.attributes, \"$1\")"
}

collector_processors() {
  case "$1" in
    pass) ;;
    rename) echo "$RENAME_PROCESSOR" ;;
    renames)
      echo "  transform:"
      echo "    log_statements:"
      echo "      - context: log"
      echo "        statements:"
      ottl_rename exception.type error.type
      ottl_rename http.request.method http.method
      ottl_rename user.id enduser.id
      ottl_rename thread.id thread.num
      ;;
    full)
      collector_processors renames
      echo "  filter:"
      echo "    logs:"
      echo "      log_record:"
      echo "        - severity_number < SEVERITY_NUMBER_INFO"
      ;;
    guard)
      collector_processors renames
      echo "  filter:"
      echo "    logs:"
      echo "      log_record:"
      echo "        - severity_number < SEVERITY_NUMBER_DEBUG"
      ;;
  esac
}

collector_chain() {
  case "$1" in
    pass) echo "batch" ;;
    rename | renames) echo "transform, batch" ;;
    full | guard) echo "transform, filter, batch" ;;
  esac
}

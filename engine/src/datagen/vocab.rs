//! Static vocabularies: services, scopes, routes, messages, exception types.
//! Everything random is drawn from these fixed tables so the data looks like a
//! real microservice shop (modelled on the OpenTelemetry demo).

/// One service of the simulated shop; each becomes one repeating `Resource`.
pub(crate) struct ServiceDef {
    /// `service.name`.
    pub name: &'static str,
    /// `service.version`.
    pub version: &'static str,
    /// `telemetry.sdk.language`.
    pub language: &'static str,
    /// `telemetry.sdk.version`.
    pub sdk_version: &'static str,
    /// `deployment.environment`.
    pub environment: &'static str,
    /// `cloud.region`.
    pub region: &'static str,
    /// Resource `schema_url` (empty = unset).
    pub schema_url: &'static str,
    /// Indexes into [`SCOPES`] this service emits from.
    pub scopes: &'static [usize],
}

/// The fixed set of services.
#[rustfmt::skip]
pub(crate) const SERVICES: &[ServiceDef] = &[
    svc("checkout", "1.12.0", "go", "1.36.0", "prod", "us-east-1", SCHEMA, &[0, 1, 5]),
    svc("frontend", "2.3.1", "nodejs", "2.0.1", "prod", "us-east-1", SCHEMA, &[0, 4]),
    svc("cart", "1.12.0", "dotnet", "1.12.0", "prod", "us-east-1", "", &[0, 2]),
    svc("payment", "0.9.4", "nodejs", "2.0.1", "prod", "us-west-2", SCHEMA, &[0, 3, 5]),
    svc("shipping", "1.4.0", "rust", "0.30.0", "staging", "eu-west-1", "", &[0, 6]),
    svc("email", "1.0.2", "ruby", "1.5.0", "prod", "us-west-2", "", &[0, 5]),
    svc("ad", "3.1.0", "java", "1.49.0", "staging", "eu-west-1", SCHEMA_OLD, &[0, 7, 3]),
    svc("recommendation", "1.7.3", "python", "1.33.1", "prod", "us-east-1", "", &[0, 3]),
];

/// Current semantic-conventions schema URL.
const SCHEMA: &str = "https://opentelemetry.io/schemas/1.26.0";
/// An older schema URL (some services lag behind).
const SCHEMA_OLD: &str = "https://opentelemetry.io/schemas/1.21.0";

/// Shorthand constructor keeping the service table compact.
#[allow(clippy::too_many_arguments)]
const fn svc(
    name: &'static str,
    version: &'static str,
    language: &'static str,
    sdk_version: &'static str,
    environment: &'static str,
    region: &'static str,
    schema_url: &'static str,
    scopes: &'static [usize],
) -> ServiceDef {
    ServiceDef {
        name,
        version,
        language,
        sdk_version,
        environment,
        region,
        schema_url,
        scopes,
    }
}

/// An instrumentation scope: (name, version, optional scope attribute).
pub(crate) type ScopeDef = (
    &'static str,
    &'static str,
    Option<(&'static str, &'static str)>,
);

/// Instrumentation scopes.
pub(crate) const SCOPES: &[ScopeDef] = &[
    ("io.opentelemetry.http", "1.2.0", None),
    (
        "io.opentelemetry.grpc-1.6",
        "2.9.0-alpha",
        Some(("otel.scope.type", "library")),
    ),
    ("OpenTelemetry.Instrumentation.AspNetCore", "1.12.0", None),
    (
        "io.opentelemetry.jdbc",
        "2.9.0-alpha",
        Some(("db.instrumentation", "jdbc")),
    ),
    ("@opentelemetry/instrumentation-fetch", "0.57.1", None),
    ("app", "", Some(("code.namespace", "shop.app"))),
    ("opentelemetry-kafka", "0.4.0", None),
    (
        "io.opentelemetry.runtime-telemetry-java8",
        "2.9.0-alpha",
        None,
    ),
];

/// HTTP endpoints: (method, route template, path prefix that gets a numeric id appended).
pub(crate) const ENDPOINTS: &[(&str, &str, &str)] = &[
    ("GET", "/api/cart/{id}", "/api/cart/"),
    ("POST", "/api/cart/{id}/items", "/api/cart/"),
    ("GET", "/api/products/{id}", "/api/products/"),
    ("POST", "/api/checkout", "/api/checkout"),
    ("GET", "/api/recs", "/api/recs"),
    ("DELETE", "/api/cart/{id}", "/api/cart/"),
    ("PUT", "/api/users/{id}", "/api/users/"),
    ("GET", "/api/shipping", "/api/shipping"),
    ("POST", "/api/charge", "/api/charge"),
    ("GET", "/healthz", "/healthz"),
];

/// Successful HTTP status codes.
pub(crate) const OK_STATUS: &[i64] = &[200, 200, 200, 200, 201, 204, 301];
/// Client-error status codes.
pub(crate) const CLIENT_ERR_STATUS: &[i64] = &[400, 404];
/// Server-error status codes.
pub(crate) const SERVER_ERR_STATUS: &[i64] = &[500, 503];

/// Exception types seen in logs and span events.
pub(crate) const EXCEPTIONS: &[&str] = &[
    "SocketTimeoutException",
    "InvalidOperationException",
    "ECONNREFUSED",
    "CardDeclinedError",
    "OperationalError",
    "DeadlineExceeded",
    "redis.ConnectionError",
    "NullPointerException",
];

/// Exception messages, paired with [`EXCEPTIONS`] by index.
pub(crate) const EXCEPTION_MESSAGES: &[&str] = &[
    "Read timed out after 3000ms",
    "Sequence contains no elements",
    "connect ECONNREFUSED 10.0.3.7:6379",
    "card 4111111111111111 expired",
    "could not connect to server: Connection refused",
    "context deadline exceeded",
    "Error 111 connecting to redis-cart:6379. Connection refused.",
    "Cannot invoke \"Order.getItems()\" because \"order\" is null",
];

/// User e-mail addresses (PII that a gateway might want to redact).
pub(crate) const EMAILS: &[&str] = &[
    "jane.doe@example.com",
    "li.wei@example.org",
    "m.garcia@shop.test",
    "ops+alerts@example.net",
];

/// Product SKUs.
pub(crate) const SKUS: &[&str] = &[
    "OLJCESPC7Z",
    "66VCHSJNUP",
    "1YMWWN1N4O",
    "L9ECAV7KIM",
    "2ZYFJ3GM2N",
];

/// Database statements with the span name and `db.system` they belong to.
pub(crate) const DB_QUERIES: &[(&str, &str, &str)] = &[
    (
        "SELECT orders",
        "postgresql",
        "SELECT id, total FROM orders WHERE user_id = $1 LIMIT 20",
    ),
    (
        "INSERT order_items",
        "postgresql",
        "INSERT INTO order_items (order_id, sku, qty) VALUES ($1, $2, $3)",
    ),
    (
        "UPDATE inventory",
        "mysql",
        "UPDATE inventory SET qty = qty - ? WHERE sku = ?",
    ),
    ("HGET", "redis", "HGET cart:{user} items"),
    (
        "SELECT products",
        "postgresql",
        "SELECT * FROM products WHERE category = $1",
    ),
];

/// Names of internal (in-process) operations.
pub(crate) const INTERNAL_OPS: &[&str] = &[
    "compute_shipping_quote",
    "render_template",
    "validate_cart",
    "apply_discounts",
    "serialize_response",
];

/// Kafka-ish topics.
pub(crate) const TOPICS: &[&str] = &["orders", "payments", "email-notifications"];

/// Span status error messages.
pub(crate) const ERROR_MESSAGES: &[&str] = &[
    "connection refused",
    "deadline exceeded",
    "upstream returned 503",
    "card declined",
];

/// Log event names (`LogRecord.event_name`).
pub(crate) const EVENT_NAMES: &[&str] = &[
    "browser.page_view",
    "checkout.completed",
    "session.start",
    "feature_flag.evaluated",
];

/// A stack-trace fragment used for `exception.stacktrace`.
pub(crate) const STACKTRACE: &str = "java.net.SocketTimeoutException: Read timed out\n\
\tat java.base/java.net.SocketInputStream.socketRead0(Native Method)\n\
\tat shop.payment.Client.charge(Client.java:87)\n\
\tat shop.checkout.Service.placeOrder(Service.java:142)\n\
\tat shop.checkout.Handler.handle(Handler.java:55)";

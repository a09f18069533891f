// shipments-consumer: an event consumer on the JVM, certified by harmless
// over the exec protocol.
//
// Written by a team that read docs/protocol.md and nothing else of
// harmless, with pgjdbc at its default settings: the connection is built
// from setup's "connection" parts as "Into a JDBC URL (pgjdbc)" says, and
// pgjdbc sends ApplicationName in a SET after the startup, not in the
// startup packet. One request at a time (max_in_flight 1): harmless scales
// it to several processes per instance, as a service scaled to many
// single-threaded replicas.
//
// Dedup: a processed_events row per (namespace, event_id), claimed with
// INSERT ... ON CONFLICT DO NOTHING RETURNING in the same transaction as
// the effect.
//
//     --swallow-commit-errors   log a failed COMMIT and answer "applied" anyway
//                               (a bug one of our services had: do not use)
//
// Build and run (Debian: default-jdk-headless, libpostgresql-jdbc-java):
//
//     javac -d out -cp /usr/share/java/postgresql.jar ShipmentsConsumer.java
//     java -cp out:/usr/share/java/postgresql.jar ShipmentsConsumer

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.StringJoiner;

public final class ShipmentsConsumer {
    static final String SERVICE = "shipments-consumer";

    /** A failed request: its protocol error class and message. */
    static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;

        final String errorClass;

        Failure(String errorClass, String message) {
            super(message);
            this.errorClass = errorClass;
        }
    }

    private final boolean swallowCommitErrors;
    private final PrintStream answers;
    private Connection conn;
    private String url;
    private Properties props;
    private String schema;
    private String effectSql;
    private List<String> effectTypes;

    ShipmentsConsumer(boolean swallowCommitErrors, PrintStream answers) {
        this.swallowCommitErrors = swallowCommitErrors;
        this.answers = answers;
    }

    public static void main(String[] args) throws Exception {
        boolean swallow = List.of(args).contains("--swallow-commit-errors");
        // stdout is for answers only: everything else goes to stderr.
        PrintStream answers = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        ShipmentsConsumer consumer = new ShipmentsConsumer(swallow, answers);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Map<String, Object> request = Json.object(Json.parse(line));
            Object id = request.get("id");
            String method = (String) request.get("method");
            Map<String, Object> params = request.get("params") == null ? Map.of() : Json.object(request.get("params"));
            try {
                Map<String, Object> result = consumer.handle(method, params);
                consumer.answer(id, "result", result);
                if ("shutdown".equals(method)) {
                    System.exit(0);
                }
            } catch (Failure f) {
                Map<String, Object> error = new LinkedHashMap<>();
                error.put("class", f.errorClass);
                error.put("message", f.getMessage());
                consumer.answer(id, "error", error);
            } catch (RuntimeException e) { // a bug of ours: never kill the process for it
                e.printStackTrace();
                consumer.answer(id, "error", Map.of("class", "transient", "message", String.valueOf(e)));
            }
        }
        consumer.close();
    }

    void answer(Object id, String kind, Map<String, Object> body) {
        Map<String, Object> message = new LinkedHashMap<>();
        message.put("id", id);
        message.put(kind, body);
        answers.print(Json.write(message) + "\n");
        answers.flush();
    }

    Map<String, Object> handle(String method, Map<String, Object> params) throws Failure {
        switch (method) {
            case "hello":
                return Map.of(
                        "protocol", 1L,
                        "implementation", Map.of("name", SERVICE + (swallowCommitErrors ? "-swallowing" : ""), "version", "2.4.0"),
                        "declares", Map.of("conflict_policy", "reject", "redelivery_window_s", 86400L, "accepts_clock", true),
                        "max_in_flight", 1L);
            case "setup":
                return setup(params);
            case "deliver":
                return deliver(params);
            case "purge":
                return purge(params);
            case "shutdown":
                close();
                return Map.of();
            default:
                throw new Failure("unsupported", "no method " + method);
        }
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> setup(Map<String, Object> params) throws Failure {
        Map<String, Object> c = Json.object(params.get("connection"));
        List<Object> hostList = (List<Object>) c.get("hosts");
        List<Object> portList = (List<Object>) c.get("ports");
        StringJoiner hosts = new StringJoiner(",");
        for (int i = 0; i < hostList.size(); i++) {
            String h = (String) hostList.get(i);
            hosts.add((h.contains(":") ? "[" + h + "]" : h) + ":" + ((Number) portList.get(i)).longValue());
        }
        url = "jdbc:postgresql://" + hosts + "/" + URLEncoder.encode((String) c.get("database"), StandardCharsets.UTF_8);
        props = new Properties();
        props.setProperty("user", (String) c.get("user"));
        props.setProperty("password", (String) c.get("password"));
        Map<String, Object> p = Json.object(c.get("parameters"));
        if ("read-write".equals(p.get("target_session_attrs"))) props.setProperty("targetServerType", "primary");
        if (p.containsKey("sslmode")) props.setProperty("sslmode", (String) p.get("sslmode"));
        if (p.containsKey("application_name")) props.setProperty("ApplicationName", (String) p.get("application_name"));

        schema = (String) params.get("schema");
        Map<String, Object> effect = Json.object(params.get("effect"));
        effectSql = ((String) effect.get("sql")).replaceAll("\\$\\d+", "?");
        effectTypes = new ArrayList<>();
        for (Object o : (List<Object>) effect.get("params")) {
            effectTypes.add((String) Json.object(o).get("type"));
        }
        try {
            Connection c1 = connection();
            try (PreparedStatement lock = c1.prepareStatement("SELECT pg_advisory_xact_lock(hashtext(?))")) {
                lock.setString(1, schema);
                lock.execute();
            }
            try (PreparedStatement create = c1.prepareStatement("CREATE TABLE IF NOT EXISTS " + table() + " ("
                    + "identity_sha256 bytea PRIMARY KEY, namespace bytea NOT NULL, event_id bytea NOT NULL, "
                    + "payload_sha256 text NOT NULL, processed_at timestamptz NOT NULL)")) {
                create.execute();
            }
            c1.commit();
        } catch (SQLException e) {
            abandon();
            throw new Failure("transient", "setup: " + e.getMessage());
        }
        return Map.of();
    }

    Map<String, Object> deliver(Map<String, Object> params) throws Failure {
        byte[] namespace = base64(params.get("namespace"), "namespace");
        byte[] eventId = base64(params.get("event_id"), "event_id");
        byte[] payload = base64(params.get("payload"), "payload");
        if (!(params.get("now") instanceof String now)) throw new Failure("invalid_input", "now is missing");
        String digest = HexFormat.of().formatHex(sha256(payload));
        // The key is a hash of the identity, the namespace's length first,
        // so that long ids fit a btree and no two identities run together.
        byte[] identity = sha256(java.nio.ByteBuffer.allocate(8).putLong(namespace.length).array(), namespace, eventId);
        List<Object> effectArgs = Json.array(params.get("effect_args"));
        String outcome;
        Connection c;
        try {
            c = connection();
            try (PreparedStatement claim = c.prepareStatement("INSERT INTO " + table()
                    + " (identity_sha256, namespace, event_id, payload_sha256, processed_at) VALUES (?, ?, ?, ?, CAST(? AS timestamptz))"
                    + " ON CONFLICT DO NOTHING RETURNING true")) {
                claim.setBytes(1, identity);
                claim.setBytes(2, namespace);
                claim.setBytes(3, eventId);
                claim.setString(4, digest);
                claim.setString(5, now);
                try (ResultSet rs = claim.executeQuery()) {
                    if (rs.next()) {
                        applyEffect(c, effectArgs);
                        outcome = "applied";
                    } else {
                        outcome = storedOutcome(c, identity, digest);
                    }
                }
            }
        } catch (SQLException e) {
            rollback();
            throw new Failure("transient", "deliver: " + e.getMessage());
        }
        try {
            c.commit();
        } catch (SQLException e) {
            abandon();
            if (swallowCommitErrors) {
                System.err.println(SERVICE + ": commit failed, carrying on: " + e.getMessage());
                return Map.of("outcome", outcome);
            }
            throw new Failure("transient", "commit: " + e.getMessage());
        }
        return Map.of("outcome", outcome);
    }

    private String storedOutcome(Connection c, byte[] identity, String digest) throws SQLException, Failure {
        try (PreparedStatement read = c.prepareStatement("SELECT payload_sha256 FROM " + table() + " WHERE identity_sha256 = ?")) {
            read.setBytes(1, identity);
            try (ResultSet rs = read.executeQuery()) {
                if (!rs.next()) { // purged since our INSERT saw it
                    rollback();
                    throw new Failure("transient", "the claim vanished; redeliver");
                }
                return rs.getString(1).equals(digest) ? "duplicate" : "rejected";
            }
        }
    }

    private void applyEffect(Connection c, List<Object> effectArgs) throws SQLException, Failure {
        try (PreparedStatement effect = c.prepareStatement(effectSql)) {
            for (int i = 0; i < effectTypes.size(); i++) {
                Object arg = effectArgs.get(i);
                switch (effectTypes.get(i)) {
                    case "bytea" -> effect.setBytes(i + 1, base64(arg, "effect_args"));
                    case "int4" -> effect.setInt(i + 1, ((Number) arg).intValue());
                    default -> effect.setString(i + 1, (String) arg);
                }
            }
            effect.executeUpdate();
        }
    }

    Map<String, Object> purge(Map<String, Object> params) throws Failure {
        if (!(params.get("cutoff") instanceof String cutoff)) throw new Failure("invalid_input", "cutoff is missing");
        try {
            Connection c = connection();
            int removed;
            try (PreparedStatement delete = c.prepareStatement("DELETE FROM " + table() + " WHERE processed_at < CAST(? AS timestamptz)")) {
                delete.setString(1, cutoff);
                removed = delete.executeUpdate();
            }
            c.commit();
            return Map.of("removed", (long) removed);
        } catch (SQLException e) {
            rollback();
            throw new Failure("transient", "purge: " + e.getMessage());
        }
    }

    private Connection connection() throws SQLException {
        if (conn == null || conn.isClosed()) {
            conn = DriverManager.getConnection(url, props);
            conn.setAutoCommit(false);
        }
        return conn;
    }

    private String table() {
        return "\"" + schema.replace("\"", "\"\"") + "\".processed_events";
    }

    private void rollback() {
        if (conn == null) return;
        try {
            conn.rollback();
        } catch (SQLException e) {
            abandon();
        }
    }

    /** Drops a connection that may be broken; the next request opens another. */
    private void abandon() {
        if (conn == null) return;
        try {
            conn.close();
        } catch (SQLException ignored) {
            // closed already
        }
        conn = null;
    }

    void close() {
        abandon();
    }

    private static byte[] base64(Object value, String what) throws Failure {
        if (!(value instanceof String s)) throw new Failure("invalid_input", what + " is not a base64 string");
        try {
            byte[] bytes = Base64.getDecoder().decode(s);
            if (!Base64.getEncoder().encodeToString(bytes).equals(s)) throw new IllegalArgumentException("not canonical");
            return bytes;
        } catch (IllegalArgumentException e) {
            throw new Failure("invalid_input", what + ": " + e.getMessage());
        }
    }

    private static byte[] sha256(byte[]... parts) {
        try {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            for (byte[] p : parts) md.update(p);
            return md.digest();
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Just enough JSON for the protocol: no library in a one-file service. */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        static Object parse(String text) {
            Json p = new Json(text);
            Object v = p.value();
            p.space();
            if (p.i != text.length()) throw new IllegalArgumentException("trailing data at " + p.i);
            return v;
        }

        @SuppressWarnings("unchecked")
        static Map<String, Object> object(Object o) {
            if (!(o instanceof Map)) throw new IllegalArgumentException("not an object: " + o);
            return (Map<String, Object>) o;
        }

        @SuppressWarnings("unchecked")
        static List<Object> array(Object o) {
            if (!(o instanceof List)) throw new IllegalArgumentException("not an array: " + o);
            return (List<Object>) o;
        }

        private void space() {
            while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++;
        }

        private Object value() {
            space();
            char c = s.charAt(i);
            switch (c) {
                case '{': {
                    Map<String, Object> m = new LinkedHashMap<>();
                    i++;
                    space();
                    if (s.charAt(i) == '}') { i++; return m; }
                    while (true) {
                        space();
                        String k = string();
                        space();
                        expect(':');
                        m.put(k, value());
                        space();
                        if (s.charAt(i) == ',') { i++; continue; }
                        expect('}');
                        return m;
                    }
                }
                case '[': {
                    List<Object> l = new ArrayList<>();
                    i++;
                    space();
                    if (s.charAt(i) == ']') { i++; return l; }
                    while (true) {
                        l.add(value());
                        space();
                        if (s.charAt(i) == ',') { i++; continue; }
                        expect(']');
                        return l;
                    }
                }
                case '"':
                    return string();
                case 't': i += 4; return true;
                case 'f': i += 5; return false;
                case 'n': i += 4; return null;
                default: {
                    int start = i;
                    while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
                    String num = s.substring(start, i);
                    if (num.matches("-?\\d+")) return Long.parseLong(num);
                    return Double.parseDouble(num);
                }
            }
        }

        private void expect(char c) {
            if (s.charAt(i) != c) throw new IllegalArgumentException("expected " + c + " at " + i);
            i++;
        }

        private String string() {
            expect('"');
            StringBuilder b = new StringBuilder();
            while (true) {
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') { b.append(c); continue; }
                char e = s.charAt(i++);
                switch (e) {
                    case 'n' -> b.append('\n');
                    case 't' -> b.append('\t');
                    case 'r' -> b.append('\r');
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'u' -> { b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; }
                    default -> b.append(e);
                }
            }
        }

        static String write(Object o) {
            StringBuilder b = new StringBuilder();
            write(b, o);
            return b.toString();
        }

        private static void write(StringBuilder b, Object o) {
            if (o == null) {
                b.append("null");
            } else if (o instanceof String str) {
                b.append('"');
                for (char c : str.toCharArray()) {
                    if (c == '"' || c == '\\') b.append('\\').append(c);
                    else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
                }
                b.append('"');
            } else if (o instanceof Map<?, ?> m) {
                b.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    if (!first) b.append(',');
                    first = false;
                    write(b, String.valueOf(e.getKey()));
                    b.append(':');
                    write(b, e.getValue());
                }
                b.append('}');
            } else if (o instanceof List<?> l) {
                b.append('[');
                for (int k = 0; k < l.size(); k++) {
                    if (k > 0) b.append(',');
                    write(b, l.get(k));
                }
                b.append(']');
            } else {
                b.append(o);
            }
        }
    }
}

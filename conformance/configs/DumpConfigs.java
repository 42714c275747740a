// Asks Kafka 4.3.1's own classes for its topic and broker config definitions
// and writes them as JSON. Compiled and run by conformance/configs/extract.py
// against the jars realkafka.py fetches (javac -cp <lib>/*); never committed
// as a .class. Standard Java 17 and the Kafka jars only.
//
//     java -cp <tmp>:<lib>/* DumpConfigs OUT.json
//
// What it reads (all public, or reached by reflection where Kafka keeps a
// validator's fields private):
//   topic configs   LogConfig.configKeys()                       (what AlterConfigs on a topic takes)
//                   ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS  (the broker settings each inherits)
//   broker configs  AbstractKafkaConfig.CONFIG_DEF                (KafkaConfig.configDef: server.properties)
//                   DynamicConfig.Broker.configKeys()             (adds the dynamic-only quota configs)
//                   DynamicBrokerConfig.ALL_DYNAMIC_CONFIGS, dynamicConfigUpdateModes(),
//                   DYNAMIC_SECURITY_CONFIGS, brokerConfigSynonyms(name, true)
//   group configs   GroupConfig.CONFIG_DEF, GroupConfig.brokerSynonym(name)  (config resources of type GROUP)

import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Function;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.ConfigKey;
import org.apache.kafka.common.config.ConfigDef.Validator;
import org.apache.kafka.coordinator.group.GroupConfig;
import org.apache.kafka.server.config.AbstractKafkaConfig;
import org.apache.kafka.server.config.ConfigSynonym;
import org.apache.kafka.server.config.DynamicBrokerConfig;
import org.apache.kafka.server.config.DynamicConfig;
import org.apache.kafka.server.config.ServerTopicConfigSynonyms;
import org.apache.kafka.storage.internals.log.LogConfig;

public class DumpConfigs {

    // --- a very small JSON writer ---------------------------------------------

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof String) return q((String) o);
        if (o instanceof Boolean) return o.toString();
        if (o instanceof Double || o instanceof Float) {
            double d = ((Number) o).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) return q(o.toString());
            return o.toString();
        }
        if (o instanceof Number) return o.toString();
        if (o instanceof Map) {
            StringBuilder b = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                if (!first) b.append(", ");
                first = false;
                b.append(q(e.getKey().toString())).append(": ").append(json(e.getValue()));
            }
            return b.append('}').toString();
        }
        if (o instanceof Collection) {
            StringBuilder b = new StringBuilder("[");
            boolean first = true;
            for (Object e : (Collection<?>) o) {
                if (!first) b.append(", ");
                first = false;
                b.append(json(e));
            }
            return b.append(']').toString();
        }
        return q(o.toString());
    }

    static Map<String, Object> obj() {
        return new java.util.LinkedHashMap<>();
    }

    // --- validators ---------------------------------------------------------------

    static Object field(Object o, String name) {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) {
                // try the superclass
            } catch (IllegalAccessException e) {
                throw new RuntimeException(e);
            }
        }
        throw new RuntimeException("no field " + name + " in " + o.getClass());
    }

    static List<String> strings(Object coll) {
        List<String> out = new ArrayList<>();
        for (Object s : (Collection<?>) coll) out.add(String.valueOf(s));
        return out;
    }

    /** A validator as data: {"kind": ..., ...}; "string" is always its toString(). */
    static Map<String, Object> validator(Validator v) {
        if (v == null) return null;
        Map<String, Object> m = obj();
        String cls = v.getClass().getName();
        if (v instanceof ConfigDef.Range) {
            m.put("kind", "range");
            m.put("min", field(v, "min"));
            m.put("max", field(v, "max"));
        } else if (v instanceof ConfigDef.ValidString) {
            m.put("kind", "one_of");
            m.put("values", strings(field(v, "validStrings")));
        } else if (v instanceof ConfigDef.CaseInsensitiveValidString) {
            m.put("kind", "one_of_case_insensitive");
            m.put("values", new ArrayList<>(new TreeSet<>(strings(field(v, "validStrings")))));
        } else if (v instanceof ConfigDef.ValidList) {
            m.put("kind", "list");
            m.put("values", strings(field(field(v, "validString"), "validStrings")));   // [] = any value
            m.put("empty_allowed", field(v, "isEmptyAllowed"));
            m.put("null_allowed", field(v, "isNullAllowed"));
        } else if (v instanceof ConfigDef.NonNullValidator) {
            m.put("kind", "non_null");
        } else if (v instanceof ConfigDef.NonEmptyString) {
            m.put("kind", "non_empty_string");
        } else if (v instanceof ConfigDef.NonEmptyStringWithoutControlChars) {
            m.put("kind", "non_empty_string_without_control_chars");
        } else if (v instanceof ConfigDef.ListSize) {
            m.put("kind", "list_max_size");
            m.put("max", field(v, "maxSize"));
        } else if (v instanceof ConfigDef.CompositeValidator) {
            m.put("kind", "all_of");
            List<Object> parts = new ArrayList<>();
            for (Object p : (Collection<?>) field(v, "validators")) parts.add(validator((Validator) p));
            m.put("of", parts);
        } else if (v instanceof ConfigDef.LambdaValidator) {
            m.put("kind", "lambda");
        } else {
            m.put("kind", "custom");
            // a custom validator's own simple fields, if it has any
            Map<String, Object> fields = new TreeMap<>();
            for (Class<?> c = v.getClass(); c != null && c != Object.class; c = c.getSuperclass()) {
                for (Field f : c.getDeclaredFields()) {
                    if (Modifier.isStatic(f.getModifiers())) continue;
                    try {
                        f.setAccessible(true);
                        Object x = f.get(v);
                        if (x == null || x instanceof Number || x instanceof String || x instanceof Boolean)
                            fields.put(f.getName(), x);
                        else if (x instanceof Collection)
                            fields.put(f.getName(), strings(x));
                        else
                            fields.put(f.getName(), x.getClass().getName());
                    } catch (Exception e) {
                        fields.put(f.getName(), "?" + e);
                    }
                }
            }
            if (!fields.isEmpty()) m.put("fields", fields);
        }
        m.put("class", cls);
        m.put("string", v.toString());
        return m;
    }

    // --- config keys ----------------------------------------------------------------

    static Map<String, Object> key(ConfigKey k) {
        Map<String, Object> m = obj();
        m.put("name", k.name);
        m.put("type", k.type.name());
        boolean has = k.hasDefault();
        m.put("has_default", has);
        // As DescribeConfigs shows it: ConfigDef.convertToString of the parsed default
        m.put("default", has ? ConfigDef.convertToString(k.defaultValue, k.type) : null);
        m.put("validator", validator(k.validator));
        m.put("importance", k.importance == null ? null : k.importance.name());
        m.put("sensitive", k.type == ConfigDef.Type.PASSWORD);
        m.put("internal", k.internalConfig);
        m.put("group", k.group);
        m.put("documentation", k.documentation);
        return m;
    }

    static String converterName(Function<String, String> f) {
        if (f == ConfigSynonym.HOURS_TO_MILLISECONDS) return "hours_to_ms";
        if (f == ConfigSynonym.MINUTES_TO_MILLISECONDS) return "minutes_to_ms";
        if (f == null || "hello".equals(f.apply("hello"))) return "identity";
        return "unknown:" + f;
    }

    // The ConfigDefs AbstractKafkaConfig.CONFIG_DEF merges, in its order (Kafka
    // 4.3.1's AbstractKafkaConfig). Used only to say which part of Kafka defines
    // each broker config (the groups of the generated block); main() checks
    // that together they define exactly CONFIG_DEF's names.
    static final String[] BROKER_PARTS = {
        "org.apache.kafka.server.log.remote.storage.RemoteLogManagerConfig",
        "org.apache.kafka.server.config.ServerConfigs",
        "org.apache.kafka.raft.KRaftConfigs",
        "org.apache.kafka.raft.MetadataLogConfig",
        "org.apache.kafka.network.SocketServerConfigs",
        "org.apache.kafka.server.config.ReplicationConfigs",
        "org.apache.kafka.coordinator.group.GroupCoordinatorConfig",
        "org.apache.kafka.storage.internals.log.CleanerConfig",
        "org.apache.kafka.storage.internals.log.LogConfig",                 // its SERVER_CONFIG_DEF
        "org.apache.kafka.coordinator.group.modern.share.ShareGroupConfig",
        "org.apache.kafka.coordinator.share.ShareCoordinatorConfig",
        "org.apache.kafka.coordinator.transaction.TransactionLogConfig",
        "org.apache.kafka.coordinator.transaction.TransactionStateManagerConfig",
        "org.apache.kafka.raft.QuorumConfig",
        "org.apache.kafka.server.metrics.MetricConfigs",
        "org.apache.kafka.server.config.QuotaConfig",
        "org.apache.kafka.common.config.internals.BrokerSecurityConfigs",
        "org.apache.kafka.server.config.DelegationTokenManagerConfigs",
        "org.apache.kafka.coordinator.transaction.AddPartitionsToTxnConfig",
    };

    static ConfigDef partDef(String className) throws Exception {
        Class<?> c = Class.forName(className);
        for (String f : new String[] {"SERVER_CONFIG_DEF", "CONFIG_DEF"}) {
            try {
                return (ConfigDef) c.getField(f).get(null);
            } catch (NoSuchFieldException e) {
                // next
            }
        }
        return (ConfigDef) c.getMethod("configDef").invoke(null);
    }

    public static void main(String[] args) throws Exception {
        Map<String, Object> out = obj();
        out.put("kafka_version", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        out.put("kafka_commit", org.apache.kafka.common.utils.AppInfoParser.getCommitId());

        // topic configs
        Map<String, ConfigKey> topicKeys = new TreeMap<>(LogConfig.configKeys());
        List<Object> topics = new ArrayList<>();
        for (ConfigKey k : topicKeys.values()) {
            Map<String, Object> m = key(k);
            List<Object> syn = new ArrayList<>();
            List<ConfigSynonym> chain = ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS.get(k.name);
            if (chain != null) {
                for (ConfigSynonym s : chain) {
                    Map<String, Object> sm = obj();
                    sm.put("name", s.name());
                    sm.put("converter", converterName(s.converter()));
                    syn.add(sm);
                }
            }
            m.put("broker_synonyms", syn);
            topics.add(m);
        }
        out.put("topic", topics);

        // broker configs: KafkaConfig's ConfigDef, plus the dynamic-only ones
        Map<String, ConfigKey> staticKeys = new TreeMap<>(AbstractKafkaConfig.CONFIG_DEF.configKeys());
        Map<String, ConfigKey> dynamicKeys = DynamicConfig.Broker.configKeys();
        Map<String, ConfigKey> all = new TreeMap<>(staticKeys);
        for (Map.Entry<String, ConfigKey> e : dynamicKeys.entrySet()) all.putIfAbsent(e.getKey(), e.getValue());
        Map<String, String> modes = DynamicBrokerConfig.dynamicConfigUpdateModes();
        Set<String> allDynamic = DynamicBrokerConfig.ALL_DYNAMIC_CONFIGS;
        Set<String> securityDynamic = DynamicBrokerConfig.DYNAMIC_SECURITY_CONFIGS;
        Map<String, String> definedIn = new TreeMap<>();
        for (String part : BROKER_PARTS) {
            String label = part.substring(part.lastIndexOf('.') + 1);
            for (String name : partDef(part).names()) {
                if (definedIn.containsKey(name))
                    throw new IllegalStateException(name + " defined twice: " + definedIn.get(name) + ", " + label);
                definedIn.put(name, label);
            }
        }
        if (!definedIn.keySet().equals(staticKeys.keySet()))
            throw new IllegalStateException("BROKER_PARTS do not add up to AbstractKafkaConfig.CONFIG_DEF");
        for (String name : dynamicKeys.keySet()) definedIn.putIfAbsent(name, "QuotaConfig.brokerQuotaConfigs");
        List<Object> brokers = new ArrayList<>();
        for (ConfigKey k : all.values()) {
            Map<String, Object> m = key(k);
            m.put("defined_in", definedIn.get(k.name));
            m.put("in_kafka_config", staticKeys.containsKey(k.name));   // false: dynamic-only (quotas)
            m.put("dynamic_update", modes.get(k.name));                  // null, "per-broker", "cluster-wide"
            m.put("read_only", !allDynamic.contains(k.name));            // as ConfigHelper describes it
            m.put("listener_prefix_only", securityDynamic.contains(k.name));
            m.put("synonyms", DynamicBrokerConfig.brokerConfigSynonyms(k.name, true));
            brokers.add(m);
        }
        out.put("broker", brokers);

        // group configs (config resources of type GROUP): each defaults from a broker setting
        List<Object> groups = new ArrayList<>();
        for (ConfigKey k : new TreeMap<>(GroupConfig.CONFIG_DEF.configKeys()).values()) {
            Map<String, Object> m = key(k);
            m.put("broker_synonym", GroupConfig.brokerSynonym(k.name).orElse(null));
            groups.add(m);
        }
        out.put("group", groups);

        // dynamic names that no ConfigDef defines (should be none)
        TreeSet<String> undefined = new TreeSet<>(allDynamic);
        undefined.removeAll(all.keySet());
        out.put("dynamic_without_definition", new ArrayList<>(undefined));
        out.put("dynamic_security_configs", new ArrayList<>(new TreeSet<>(securityDynamic)));

        try (Writer w = new OutputStreamWriter(new FileOutputStream(args[0]), StandardCharsets.UTF_8)) {
            w.write(json(out));
            w.write("\n");
        }
    }
}

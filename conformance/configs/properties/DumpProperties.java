import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.common.utils.Utils;

/**
 * Reads each .properties file named on the command line exactly as Kafka 4.3.1
 * reads server.properties -- kafka.Kafka.getPropsFromArgs calls
 * org.apache.kafka.common.utils.Utils.loadProps(path), which is
 * Properties.load(Files.newInputStream(path)): bytes, one ISO-8859-1 char each --
 * and prints one JSON object: {"file name": {"props": {key: value}}} or
 * {"file name": {"error": {"class": ..., "message": ...}}}.
 * The output is ASCII: every other char is written as a UTF-16 \\uXXXX escape.
 * Run by check.py (next to this file) against the Kafka jars realkafka.py fetches.
 */
public class DumpProperties {
    public static void main(String[] args) {
        StringBuilder out = new StringBuilder("{");
        for (int i = 0; i < args.length; i++) {
            String path = args[i];
            String name = path.substring(path.lastIndexOf('/') + 1);
            out.append(i == 0 ? "\n" : ",\n").append(json(name)).append(": ");
            try {
                Properties props = Utils.loadProps(path);
                Map<String, String> sorted = new TreeMap<>();
                for (String key : props.stringPropertyNames())
                    sorted.put(key, props.getProperty(key));
                out.append("{\"props\": {");
                String sep = "";
                for (Map.Entry<String, String> e : sorted.entrySet()) {
                    out.append(sep).append(json(e.getKey())).append(": ").append(json(e.getValue()));
                    sep = ", ";
                }
                out.append("}}");
            } catch (Exception e) {
                out.append("{\"error\": {\"class\": ").append(json(e.getClass().getName()))
                   .append(", \"message\": ").append(json(String.valueOf(e.getMessage()))).append("}}");
            }
        }
        System.out.println(out.append("\n}"));
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c >= 0x20 && c < 0x7f) b.append(c);
            else b.append(String.format("\\u%04x", (int) c));
        }
        return b.append('"').toString();
    }
}

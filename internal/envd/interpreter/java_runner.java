// Airlock Java context runner. Started by airlock-envd (one JVM per context)
// as a single-file source program; it keeps a JShell (local execution
// engine: snippets run in this JVM, so System.out is this process's fd 1)
// whose state lives from one execution to the next.
//
// Requests arrive on stdin, one a line: "<id> <base64 code>[ <base64 name>:
// <base64 value>]..." (the env vars of that execution). User output goes to
// fd 1/2; after each execution a sync marker is written to both, and a JSON
// reply to fd 3: {"id","ok","text"} or {"id","ok":false,"name","value",
// "traceback"}. SIGINT stops the running execution.

import java.io.FileOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.ExpressionSnippet;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.UnresolvedReferenceException;
import jdk.jshell.VarSnippet;

public class AirlockJavaRunner {
    static final String SYNC = "\u0001AIRLOCK_SYNC\u0001";
    // The imports the jshell tool starts with (its DEFAULT startup).
    static final String[] IMPORTS = {
        "java.io.*", "java.math.*", "java.net.*", "java.nio.file.*", "java.util.*",
        "java.util.concurrent.*", "java.util.function.*", "java.util.prefs.*",
        "java.util.regex.*", "java.util.stream.*",
    };

    static PrintStream out0, err0;
    static OutputStream ctl;
    static JShell shell;
    static volatile boolean running, stopped;

    public static void main(String[] args) throws Exception {
        out0 = System.out;
        err0 = System.err;
        ctl = new FileOutputStream("/proc/self/fd/3");
        shell = JShell.builder().executionEngine("local").build();
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), s -> {
            if (running) {
                stopped = true;
                shell.stop();
            }
        });
        // The sandbox's env vars are also system properties, as in E2B's
        // Java kernel (System.getProperty("NAME")).
        String props = System.getenv("AIRLOCK_JAVA_PROPS");
        if (props != null) {
            for (String k : props.split(",")) {
                String v = System.getenv(k);
                if (!k.isEmpty() && v != null) {
                    System.setProperty(k, v);
                }
            }
        }
        // Warm the compiler with the default imports, so the first cell
        // does not pay for it.
        for (String imp : IMPORTS) {
            shell.eval("import " + imp + ";");
        }
        reply("{\"ready\":true}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.isEmpty()) {
                handle(line);
            }
        }
        System.exit(0);
    }

    static String dec(String s) {
        return new String(Base64.getDecoder().decode(s), StandardCharsets.UTF_8);
    }

    static void handle(String line) throws Exception {
        String[] parts = line.split(" ", -1);
        int id = Integer.parseInt(parts[0]);
        String code = parts.length > 1 ? dec(parts[1]) : "";
        Map<String, String> env = new HashMap<>();
        for (int i = 2; i < parts.length; i++) {
            int eq = parts[i].indexOf(':');
            if (eq > 0) {
                env.put(dec(parts[i].substring(0, eq)), dec(parts[i].substring(eq + 1)));
            }
        }
        Map<String, String> savedEnv = new HashMap<>(), savedProps = new HashMap<>();
        Map<String, String> procEnv = processEnv();
        for (Map.Entry<String, String> e : env.entrySet()) {
            savedProps.put(e.getKey(), System.getProperty(e.getKey()));
            System.setProperty(e.getKey(), e.getValue());
            if (procEnv != null) {
                savedEnv.put(e.getKey(), procEnv.get(e.getKey()));
                procEnv.put(e.getKey(), e.getValue());
            }
        }
        StringBuilder rep = new StringBuilder();
        try {
            run(id, code, rep);
        } catch (Throwable t) {
            rep.setLength(0);
            rep.append("{\"id\":").append(id).append(",\"ok\":false,\"name\":").append(json(t.getClass().getName()))
                .append(",\"value\":").append(json(String.valueOf(t.getMessage()))).append(",\"traceback\":\"\"}");
        } finally {
            running = false;
            for (Map.Entry<String, String> e : savedProps.entrySet()) {
                if (e.getValue() == null) System.clearProperty(e.getKey());
                else System.setProperty(e.getKey(), e.getValue());
            }
            if (procEnv != null) {
                for (Map.Entry<String, String> e : savedEnv.entrySet()) {
                    if (e.getValue() == null) procEnv.remove(e.getKey());
                    else procEnv.put(e.getKey(), e.getValue());
                }
            }
        }
        System.out.flush();
        System.err.flush();
        out0.print(SYNC);
        out0.flush();
        err0.print(SYNC);
        err0.flush();
        reply(rep.toString());
    }

    static void run(int id, String code, StringBuilder rep) {
        SourceCodeAnalysis sca = shell.sourceCodeAnalysis();
        String rest = code, text = null;
        running = true;
        stopped = false;
        while (!rest.isBlank() && !stopped) {
            SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
            String src;
            switch (ci.completeness()) {
                case EMPTY:
                    rest = "";
                    continue;
                case COMPLETE:
                case COMPLETE_WITH_SEMI:
                    src = ci.source();
                    rest = ci.remaining();
                    break;
                default:
                    // Incomplete or not understood: let the compiler say why.
                    src = ci.source() != null && !ci.source().isBlank() ? ci.source() : rest;
                    rest = ci.source() != null && !ci.source().isBlank() ? ci.remaining() : "";
            }
            text = null;
            for (SnippetEvent ev : shell.eval(src)) {
                if (ev.causeSnippet() != null) {
                    continue;
                }
                Snippet sn = ev.snippet();
                if (ev.status() == Snippet.Status.REJECTED) {
                    compileError(id, sn, rep);
                    return;
                }
                JShellException ex = ev.exception();
                if (ex != null) {
                    runtimeError(id, ex, rep);
                    return;
                }
                if (ev.value() != null && displayed(sn)) {
                    text = display(sn, ev.value());
                }
            }
        }
        if (stopped) {
            rep.append("{\"id\":").append(id).append(",\"ok\":false,\"name\":\"ExecutionAborted\",\"value\":\"Execution was aborted\",\"traceback\":\"\"}");
            return;
        }
        rep.append("{\"id\":").append(id).append(",\"ok\":true");
        if (text != null) {
            rep.append(",\"text\":").append(json(text));
        }
        rep.append("}");
    }

    // displayed tells whether a snippet's value is the cell's result: an
    // expression (1 + 1, x), not a declaration (int x = 1).
    static boolean displayed(Snippet sn) {
        return sn.kind() == Snippet.Kind.EXPRESSION
            || sn.kind() == Snippet.Kind.VAR && sn.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND;
    }

    // display renders a value as text/plain: JShell quotes and escapes
    // strings ("a\tb"); a result shows the string itself.
    static String display(Snippet sn, String value) {
        String type = sn instanceof VarSnippet ? ((VarSnippet) sn).typeName()
            : sn instanceof ExpressionSnippet ? ((ExpressionSnippet) sn).typeName() : "";
        if ((type.equals("String") || type.equals("java.lang.String")) && value.length() >= 2
            && value.startsWith("\"") && value.endsWith("\"")) {
            return unescape(value.substring(1, value.length() - 1));
        }
        return value;
    }

    static String unescape(String s) {
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c != '\\' || i + 1 == s.length()) {
                b.append(c);
                continue;
            }
            char n = s.charAt(++i);
            switch (n) {
                case 'b': b.append('\b'); break;
                case 't': b.append('\t'); break;
                case 'n': b.append('\n'); break;
                case 'f': b.append('\f'); break;
                case 'r': b.append('\r'); break;
                case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
                    int v = n - '0', j = 0;
                    while (j < 2 && i + 1 < s.length() && s.charAt(i + 1) >= '0' && s.charAt(i + 1) <= '7') {
                        v = v * 8 + (s.charAt(++i) - '0');
                        j++;
                    }
                    b.append((char) v);
                    break;
                }
                default: b.append(n); // \" \' \\
            }
        }
        return b.toString();
    }

    static void compileError(int id, Snippet sn, StringBuilder rep) {
        List<String> msgs = new ArrayList<>();
        StringBuilder tb = new StringBuilder();
        String src = sn.source();
        for (Diag d : (Iterable<Diag>) shell.diagnostics(sn)::iterator) {
            String m = d.getMessage(Locale.ROOT);
            msgs.add(m);
            tb.append(d.isError() ? "error: " : "warning: ").append(m).append('\n');
            int pos = (int) d.getPosition();
            if (pos >= 0 && pos <= src.length()) {
                int ls = src.lastIndexOf('\n', Math.max(pos - 1, 0)) + 1;
                if (pos > 0 && src.charAt(pos - 1) == '\n') ls = pos;
                int le = src.indexOf('\n', pos);
                if (le < 0) le = src.length();
                tb.append(src, ls, le).append('\n').append(" ".repeat(Math.max(pos - ls, 0))).append("^\n");
            }
        }
        if (msgs.isEmpty()) {
            msgs.add("the snippet was rejected: " + src.strip());
        }
        rep.append("{\"id\":").append(id).append(",\"ok\":false,\"name\":\"CompilationException\",\"value\":")
            .append(json(String.join("\n", msgs))).append(",\"traceback\":").append(json(tb.toString())).append("}");
    }

    static void runtimeError(int id, JShellException ex, StringBuilder rep) {
        String name, value;
        if (ex instanceof EvalException) {
            name = ((EvalException) ex).getExceptionClassName();
            value = ex.getMessage() == null ? "" : ex.getMessage();
        } else if (ex instanceof UnresolvedReferenceException) {
            Snippet s = ((UnresolvedReferenceException) ex).getSnippet();
            name = "UnresolvedReferenceException";
            value = "attempted to use a snippet with unresolved references: " + s.source().strip();
        } else {
            name = ex.getClass().getName();
            value = ex.getMessage() == null ? "" : ex.getMessage();
        }
        StringBuilder tb = new StringBuilder(name);
        if (!value.isEmpty()) tb.append(": ").append(value);
        for (StackTraceElement st : ex.getStackTrace()) {
            tb.append("\n\tat ").append(st);
        }
        for (Throwable c = ex.getCause(); c != null; c = c.getCause()) {
            tb.append("\nCaused by: ").append(c instanceof EvalException ? ((EvalException) c).getExceptionClassName() : c.getClass().getName());
            if (c.getMessage() != null) tb.append(": ").append(c.getMessage());
            for (StackTraceElement st : c.getStackTrace()) {
                tb.append("\n\tat ").append(st);
            }
        }
        rep.append("{\"id\":").append(id).append(",\"ok\":false,\"name\":").append(json(name)).append(",\"value\":")
            .append(json(value)).append(",\"traceback\":").append(json(tb.toString())).append("}");
    }

    // processEnv is the map behind System.getenv (and what ProcessBuilder
    // copies), writable with --add-opens java.base/java.util and
    // java.base/java.lang; null when the JVM refuses.
    @SuppressWarnings("unchecked")
    static Map<String, String> processEnv() {
        try {
            Class<?> pe = Class.forName("java.lang.ProcessEnvironment");
            Field f = pe.getDeclaredField("theUnmodifiableEnvironment");
            f.setAccessible(true);
            Object unmod = f.get(null);
            Field m = unmod.getClass().getDeclaredField("m");
            m.setAccessible(true);
            return (Map<String, String>) m.get(unmod);
        } catch (Exception | Error e) {
            return null;
        }
    }

    static synchronized void reply(String s) throws Exception {
        ctl.write((s + "\n").getBytes(StandardCharsets.UTF_8));
        ctl.flush();
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
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
}

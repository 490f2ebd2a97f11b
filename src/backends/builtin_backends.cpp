// The backends built into this library. The registry (delegate.cpp) calls this once,
// before its first lookup; it is the one place that names the backends, so the runtime
// above them names none.
namespace qhx {

void register_cpu_backend();  // backends/cpu/cpu_backend.cpp
void register_qnn_backend();  // backends/qnn/qnn_backend.cpp: loads QAIRT only when a graph uses it

void register_builtin_backends() {
  register_cpu_backend();
  register_qnn_backend();
}

}  // namespace qhx

#include "peer.hpp"
#include "runtime/error.hpp"
namespace troupe::peer {
void scenario_kv(const Args&) { fail("todo"); }
}

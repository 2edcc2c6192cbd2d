// The internode Buffer's argument checks, apart from its launchers: pure host
// code over the arguments and what the Buffer was made with, so that a CPU
// test reaches every refusal with crafted arguments (no GPU, no Buffer).
#pragma once

#include <epkit/ep.h>

#include <cstdint>
#include <string>

#include "ep/internode/buffer.h"
#include "ep/internode/leg_counts.h"

namespace epkit::ep {

/// InternodeBuffer::init's checks of its options for `ranks` ranks.
Result<void> check_internode_options(const BufferOptions& options, int ranks);
/// dispatch()'s checks, a cached dispatch's (args.handle set) included.
Result<void> check_internode_dispatch(const DispatchArgs& args, int ranks,
                                      const BufferOptions& options);
/// combine()'s checks.
Result<void> check_internode_combine(const CombineArgs& args, int ranks);

/// The words for a count message that failed its check on the device
/// (k_bad_leg_message; read_leg_counts in leg_counts.h): `sender` is its
/// global rank. The caller says which call saw it.
std::string leg_message_error(const k::LegMessageFault& fault, long long sender);

}  // namespace epkit::ep

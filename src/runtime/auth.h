// The rendezvous secret and the proofs built from it.
//
// Every node of a job holds the same secret (a file or an environment value,
// docs/deploy.md); the store's handshake proves it both ways with
// HMAC-SHA256 over fresh nonces, so the secret never crosses the network and
// a recorded handshake cannot be replayed (docs/runtime.md, "Threat model").
#pragma once

#include <epkit/result.h>

#include <string>
#include <string_view>

#include "host/env.h"

namespace epkit::runtime {

inline constexpr std::size_t k_nonce_bytes = 32;
inline constexpr std::size_t k_mac_bytes = 32;
/// A shorter secret is too easy to guess offline from one recorded handshake.
inline constexpr std::size_t k_min_secret_bytes = 16;
inline constexpr std::size_t k_max_secret_bytes = 4096;

/// HMAC-SHA256 of `label`, a zero byte, then `data`, keyed with `secret`
/// (may be empty: the open mode, see load_secret).
std::string hmac_sha256(std::string_view secret, std::string_view label, std::string_view data);
/// Compares two MACs in time independent of where they differ.
bool same_mac(std::string_view a, std::string_view b);
/// `n` bytes from the system's random source.
Result<std::string> random_bytes(std::size_t n);

/// The job's secret: the file EPKIT_SECRET_FILE names (a regular file of at
/// most 4 KiB; trailing whitespace is not part of it), else EPKIT_SECRET's
/// value, else "" (no secret: anyone who reaches the port may join). A set
/// but unusable source (missing or oversized file, fewer than 16 bytes) is an
/// error naming it, never a silent fallback to no secret.
Result<std::string> load_secret(const host::Env& env);

}  // namespace epkit::runtime

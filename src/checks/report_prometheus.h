// The doctor report in the Prometheus text exposition format (version 0.0.4),
// for node-exporter's textfile collector (docs/deploy.md, "Node prep").
#pragma once

#include <string>

#include "checks/registry.h"

namespace epkit::checks {

/// Metric families, all gauges:
///   epkit_doctor_check_status{check,group,status}  1 for the check's status, 0 for the others
///   epkit_doctor_checks{status}                    how many checks ended in each status
///   epkit_doctor_exit_code                         0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN
///   epkit_doctor_duration_seconds, epkit_doctor_gpus, epkit_doctor_rdma_devices
///   epkit_build_info{version}                      always 1
/// No timestamps: the collector exports the file's mtime itself.
std::string to_prometheus(const Report& report, const Context& ctx);

/// A label value with \, " and newline escaped as the format asks.
std::string prometheus_label_value(std::string_view value);

}  // namespace epkit::checks

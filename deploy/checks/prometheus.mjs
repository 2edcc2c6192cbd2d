// Parses `epkit doctor --format prometheus` output with an independent
// Prometheus text-format parser and checks the metric families.
// Usage: node prometheus.mjs FILE EXPECTED_EXIT_CODE   exit 1 naming each error.
import fs from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const parse = require('parse-prometheus-text-format');

const [file, expected] = process.argv.slice(2);
const errors = [];
let families = [];
try {
  families = parse(fs.readFileSync(file, 'utf8'));
} catch (e) {
  errors.push(`does not parse: ${e.message}`);
}
const byName = new Map(families.map((f) => [f.name, f]));
for (const name of ['epkit_doctor_check_status', 'epkit_doctor_checks', 'epkit_doctor_exit_code',
  'epkit_doctor_duration_seconds', 'epkit_doctor_gpus', 'epkit_doctor_rdma_devices', 'epkit_build_info']) {
  const f = byName.get(name);
  if (!f) { errors.push(`family ${name} missing`); continue; }
  if (f.type !== 'GAUGE') errors.push(`${name} is ${f.type}, not GAUGE`);
  if (!f.help) errors.push(`${name} has no HELP`);
}
const status = byName.get('epkit_doctor_check_status');
const perCheck = new Map();
for (const m of status?.metrics ?? []) {
  const entry = perCheck.get(m.labels.check) ?? { rows: 0, ones: 0 };
  entry.rows += 1;
  entry.ones += Number(m.value) === 1 ? 1 : 0;
  if (!['pass', 'warn', 'fail', 'skip', 'unknown'].includes(m.labels.status)) {
    errors.push(`check ${m.labels.check}: status label ${m.labels.status}`);
  }
  perCheck.set(m.labels.check, entry);
}
if (perCheck.size === 0) errors.push('no check in epkit_doctor_check_status');
for (const [check, e] of perCheck) {
  if (e.rows !== 5 || e.ones !== 1) errors.push(`check ${check}: ${e.rows} rows, ${e.ones} set (want 5 and 1)`);
}
const counted = (byName.get('epkit_doctor_checks')?.metrics ?? []).reduce((s, m) => s + Number(m.value), 0);
if (counted !== perCheck.size) errors.push(`epkit_doctor_checks sums to ${counted}, ${perCheck.size} checks ran`);
const code = byName.get('epkit_doctor_exit_code')?.metrics?.[0]?.value;
if (expected !== undefined && Number(code) !== Number(expected)) errors.push(`exit code metric ${code}, want ${expected}`);

for (const e of errors) console.error(`${file}: ${e}`);
console.log(`prometheus: ${families.length} families, ${perCheck.size} checks, ${errors.length} problems`);
process.exit(errors.length ? 1 : 0);

// Checks deploy/docker/Dockerfile without building it (no base image can be
// pulled offline): dockerfilelint finds nothing; every COPY source exists and
// the .dockerignore lets it through; the build stage builds with the README's
// script (scripts/setup.sh) and nothing else, for sm_90 and sm_100; the
// runtime stage is a CUDA runtime image with the RDMA libraries and no driver.
// Usage: node dockerfile.mjs REPO_ROOT [DOCKERFILE]   exit 1 naming each error.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { DockerfileParser } = require('dockerfile-ast');
const dockerfilelint = require('dockerfilelint');

const root = process.argv[2];
const file = process.argv[3] ?? path.join(root, 'deploy/docker/Dockerfile');
const text = fs.readFileSync(file, 'utf8');
const errors = [];
const fail = (line, message) => errors.push(`${path.relative(root, file)}:${line}: ${message}`);

for (const item of dockerfilelint.run(path.dirname(file), text)) {
  fail(item.line, `dockerfilelint ${item.category}: ${item.title}: ${item.description}`.slice(0, 300));
}

const ignorePath = `${file}.dockerignore`;
const allowed = fs.existsSync(ignorePath)
  ? fs.readFileSync(ignorePath, 'utf8').split('\n').filter((l) => l.startsWith('!'))
      .map((l) => l.slice(1).replace(/\/$/, ''))
  : null;

const stages = [];
for (const ins of DockerfileParser.parse(text).getInstructions()) {
  const keyword = ins.getKeyword();
  const args = ins.getArguments().map((a) => a.getValue());
  const line = ins.getRange().start.line + 1;
  if (keyword === 'FROM') {
    stages.push({ image: args[0], name: args[2] ?? '', runs: [], copies: [], env: [], line });
    continue;
  }
  const stage = stages.at(-1);
  if (!stage) continue;
  if (keyword === 'RUN') stage.runs.push({ line, text: args.join(' ') });
  if (keyword === 'ENV') stage.env.push(...args);
  if (keyword === 'COPY' || keyword === 'ADD') {
    const from = ins.getFlags().find((f) => f.getName() === 'from');
    stage.copies.push({ line, from: from?.getValue(), sources: args.slice(0, -1) });
  }
}

if (stages.length < 2) fail(1, 'expected a build stage and a runtime stage');
const build = stages[0];
const runtime = stages.at(-1);
if (!/-devel-/.test(build.image)) fail(build.line, `build stage ${build.image} is not a CUDA devel image`);
if (!/-runtime-/.test(runtime.image)) fail(runtime.line, `runtime stage ${runtime.image} is not a CUDA runtime image`);
if (build.image.replace('-devel-', '-runtime-') !== runtime.image) {
  fail(runtime.line, `runtime ${runtime.image} and build ${build.image} differ beyond devel/runtime (NCCL must match)`);
}

// The README's build script, once, and no copy of its steps.
const setup = build.runs.filter((r) => /^bash scripts\/setup\.sh (doctor|test)\b/.test(r.text));
if (setup.length !== 1) fail(build.line, 'the build stage must run `bash scripts/setup.sh doctor|test` exactly once');
for (const r of build.runs) {
  if (!setup.includes(r) && /\b(cmake|ninja|make|apt-get|g\+\+|nvcc)\b/.test(r.text)) {
    fail(r.line, `build step outside scripts/setup.sh: ${r.text}`);
  }
}
const archs = build.env.find((e) => e.startsWith('CUDAARCHS='));
if (!archs || !/\b90\b/.test(archs) || !/\b100\b/.test(archs)) fail(build.line, 'CUDAARCHS must list 90 and 100');
const setupText = fs.readFileSync(path.join(root, 'scripts/setup.sh'), 'utf8');
if (!/CUDAARCHS/.test(setupText)) fail(build.line, 'scripts/setup.sh does not pass CUDAARCHS to CMake');

// Runtime: RDMA user space, no driver.
const installs = runtime.runs.map((r) => r.text).join(' ');
for (const pkg of ['libibverbs1', 'librdmacm1', 'ibverbs-providers']) {
  if (!installs.includes(pkg)) fail(runtime.line, `runtime stage does not install ${pkg}`);
}
if (/nvidia-driver|libnvidia-|cuda-drivers|libcuda1|nvidia-utils/.test(installs)) {
  fail(runtime.line, 'runtime stage installs a driver package: the driver comes from the node');
}

for (const stage of stages) {
  for (const c of stage.copies) {
    if (c.from) {
      if (!stages.some((s) => s.name === c.from)) fail(c.line, `COPY --from=${c.from}: no such stage`);
      continue;
    }
    for (const src of c.sources) {
      if (!fs.existsSync(path.join(root, src))) fail(c.line, `COPY source ${src} does not exist`);
      const clean = src.replace(/\/$/, '');
      if (allowed && !allowed.some((a) => clean === a || clean.startsWith(`${a}/`))) {
        fail(c.line, `COPY source ${src} is excluded by ${path.basename(ignorePath)}`);
      }
    }
  }
}
const scripts = path.join(root, 'deploy/docker/scripts');
for (const name of fs.readdirSync(scripts)) {
  if (!(fs.statSync(path.join(scripts, name)).mode & 0o111)) fail(1, `deploy/docker/scripts/${name} is not executable`);
}

for (const e of errors) console.error(e);
console.log(`dockerfile: ${stages.length} stages, ${errors.length} problems`);
process.exit(errors.length ? 1 : 0);

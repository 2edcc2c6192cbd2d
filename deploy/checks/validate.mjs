// Validates rendered Kubernetes manifests (multi-document YAML files) offline:
//  - JobSet: against the JobSet CRD's openAPIV3Schema (ajv), with every object
//    schema closed (additionalProperties: false) so an unknown or misspelt
//    field fails, as the API server's strict field validation would;
//  - core kinds: kubernetes-models (types, required fields, formats) plus a
//    walk over @kubernetes/client-node's attribute maps for unknown fields;
//  - the kit's own invariants: NNODES = parallelism = completions,
//    GPUS_PER_NODE = the nvidia.com/gpu limit, no env var with both value
//    and valueFrom.
// Usage: node validate.mjs CRD.yaml FILE.yaml...   exit 1 naming every error.
//        CRD.yaml `-`: no CRD at hand; JobSets get the invariants only (the
//        caller reports the schema check as skipped).
//        node validate.mjs CRD.yaml --cases LIST    one schema compile for many
//   cases; LIST lines are `pass|fail<TAB>pattern<TAB>name<TAB>file`: a fail
//   case must fail with an error matching the pattern (a regular expression).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import YAML from 'yaml';

const require = createRequire(import.meta.url);
const Ajv = require('ajv');

const [crdPath, ...files] = process.argv.slice(2);
if (!crdPath || files.length === 0) {
  console.error('usage: node validate.mjs JOBSET_CRD.yaml RENDERED.yaml... | --cases LIST');
  process.exit(64);
}

// Closes every object schema that lists its properties, except where the CRD
// itself keeps unknown fields.
function closeSchema(schema) {
  if (!schema || typeof schema !== 'object') return schema;
  if (Array.isArray(schema)) return schema.map(closeSchema);
  const out = {};
  for (const [k, v] of Object.entries(schema)) out[k] = closeSchema(v);
  if (out.properties && out.additionalProperties === undefined &&
      !out['x-kubernetes-preserve-unknown-fields']) {
    out.additionalProperties = false;
  }
  // int-or-string fields carry no type in the CRD.
  if (out['x-kubernetes-int-or-string']) {
    delete out.type;
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
  }
  return out;
}

function jobsetValidator() {
  if (crdPath === '-') return null;
  const crd = YAML.parse(fs.readFileSync(crdPath, 'utf8'));
  const version = crd.spec.versions.find((v) => v.name === 'v1alpha2');
  const schema = closeSchema(version.schema.openAPIV3Schema);
  const ajv = new Ajv({ strict: false, allErrors: true });
  for (const f of ['int32', 'int64', 'date-time', 'byte', 'double', 'float']) {
    ajv.addFormat(f, true);
  }
  return ajv.compile(schema);
}

// ---- core kinds: unknown fields through the client's attribute maps
const modelDir = path.dirname(require.resolve('@kubernetes/client-node/package.json')) +
  '/dist/gen/models';
const typeMaps = new Map();
async function attributes(type) {
  if (!typeMaps.has(type)) {
    const file = `${modelDir}/${type}.js`;
    if (!fs.existsSync(file)) {
      typeMaps.set(type, null);
    } else {
      const mod = await import(file);
      typeMaps.set(type, mod[type].getAttributeTypeMap());
    }
  }
  return typeMaps.get(type);
}

async function unknownFields(value, type, where, errors) {
  if (value === null || value === undefined) return;
  const array = /^Array<(.+)>$/.exec(type);
  if (array) {
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) {
        await unknownFields(value[i], array[1], `${where}[${i}]`, errors);
      }
    }
    return;
  }
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) {
    if (typeof value === 'object') {
      for (const [k, v] of Object.entries(value)) await unknownFields(v, map[1], `${where}.${k}`, errors);
    }
    return;
  }
  if (typeof value !== 'object' || Array.isArray(value)) return;
  const attrs = await attributes(type);
  if (!attrs) return;  // a primitive or free-form type
  const known = new Map(attrs.map((a) => [a.baseName, a.type]));
  for (const [k, v] of Object.entries(value)) {
    if (!known.has(k)) {
      errors.push(`${where}.${k}: unknown field (${type} has no '${k}')`);
    } else {
      await unknownFields(v, known.get(k), `${where}.${k}`, errors);
    }
  }
}

async function coreModel(doc) {
  const [group, version] = doc.apiVersion.includes('/') ? doc.apiVersion.split('/') : ['', doc.apiVersion];
  const dir = group === '' ? version : `${group}/${version}`;
  const mod = await import(`kubernetes-models/${dir}`);
  if (!mod[doc.kind]) throw new Error(`kubernetes-models/${dir} has no ${doc.kind}`);
  return { Model: mod[doc.kind], clientType: `V1${doc.kind}` };
}

// ---- the kit's invariants on the JobSet's pod template
function jobsetInvariants(doc, errors) {
  for (const [i, rj] of (doc.spec?.replicatedJobs ?? []).entries()) {
    const job = rj.template?.spec ?? {};
    const pod = job.template?.spec ?? {};
    const at = `spec.replicatedJobs[${i}]`;
    if (job.parallelism !== job.completions) {
      errors.push(`${at}: parallelism ${job.parallelism} != completions ${job.completions}`);
    }
    for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
      const env = new Map();
      for (const e of c.env ?? []) {
        if (e.value !== undefined && e.valueFrom !== undefined) {
          errors.push(`${at} container ${c.name}: env ${e.name} has both value and valueFrom`);
        }
        if (env.has(e.name)) errors.push(`${at} container ${c.name}: env ${e.name} set twice`);
        env.set(e.name, e.value);
      }
      if (env.has('NNODES') && Number(env.get('NNODES')) !== job.parallelism) {
        errors.push(`${at} container ${c.name}: NNODES=${env.get('NNODES')} but parallelism is ${job.parallelism}`);
      }
      const gpus = c.resources?.limits?.['nvidia.com/gpu'];
      if (env.has('GPUS_PER_NODE') && Number(env.get('GPUS_PER_NODE')) !== Number(gpus)) {
        errors.push(`${at} container ${c.name}: GPUS_PER_NODE=${env.get('GPUS_PER_NODE')} but the nvidia.com/gpu limit is ${gpus}`);
      }
    }
  }
}

const validateJobSet = jobsetValidator();

// Every error of every object in one file, each prefixed with where it is.
async function validateFile(file) {
  const messages = [];
  let objects = 0;
  let invalid = 0;
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  for (const [n, d] of docs.entries()) {
    const errors = d.errors.map((e) => `YAML: ${e.message}`);
    const doc = d.toJS();
    if (doc === null) continue;
    ++objects;
    const where = `${path.basename(file)}#${n} ${doc?.kind ?? '?'}/${doc?.metadata?.name ?? '?'}`;
    if (errors.length === 0) {
      if (doc.apiVersion === 'jobset.x-k8s.io/v1alpha2' && doc.kind === 'JobSet') {
        if (validateJobSet && !validateJobSet(doc)) {
          for (const e of validateJobSet.errors) {
            const extra = e.keyword === 'additionalProperties' ? ` '${e.params.additionalProperty}'` : '';
            errors.push(`${e.instancePath || '/'}: ${e.message}${extra}`);
          }
        }
        jobsetInvariants(doc, errors);
      } else {
        try {
          const { Model, clientType } = await coreModel(doc);
          try {
            new Model(doc).validate();
          } catch (e) {
            errors.push(String(e.message ?? e).replace(/\s+/g, ' '));
          }
          await unknownFields(doc, clientType, '', errors);
        } catch (e) {
          errors.push(`no model for ${doc.apiVersion} ${doc.kind}: ${e.message}`);
        }
      }
    }
    for (const e of errors) messages.push(`${where}: ${e}`);
    if (errors.length) ++invalid;
  }
  return { objects, invalid, messages };
}

if (files[0] === '--cases') {
  let wrong = 0;
  const lines = fs.readFileSync(files[1], 'utf8').split('\n').filter((l) => l.trim());
  for (const line of lines) {
    const [expect, pattern, name, file] = line.split('\t');
    const { messages } = await validateFile(file);
    const text = messages.join('\n');
    if (expect === 'pass' && messages.length === 0) {
      console.log(`ok    ${name}`);
    } else if (expect === 'fail' && messages.length && new RegExp(pattern).test(text)) {
      console.log(`ok    ${name} (fails: ${text.match(new RegExp(pattern))[0]})`);
    } else {
      ++wrong;
      console.log(`FAIL  ${name}: ${expect === 'pass' ? 'invalid' : messages.length ? `failed without '${pattern}'` : 'passed, but must fail'}`);
      for (const m of messages) console.log(`      ${m}`);
    }
  }
  process.exit(wrong ? 1 : 0);
}

let failed = 0;
let objects = 0;
for (const file of files) {
  const result = await validateFile(file);
  objects += result.objects;
  failed += result.invalid;
  for (const m of result.messages) console.error(m);
}
console.log(`validate: ${objects} objects in ${files.length} files, ${failed} invalid`);
process.exit(failed ? 1 : 0);

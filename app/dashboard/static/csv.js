// CSV scoring on the scoring page: parse and check rows here (public bounds only), then score
// them with POST /v1/risk/batch, or one by one with POST /v1/risk where the service has no
// batch endpoint (404/405), at most FALLBACK_LIMIT rows. Rows never leave the page otherwise.

import {
  badge,
  clearErrors,
  errorMessage,
  h,
  markField,
  percent,
  points,
  request,
} from "./common.js";

const BATCH_LIMIT = 10000;
const FALLBACK_LIMIT = 200;
let FEATURES = [];
let batchAvailable = null; // unknown until the first CSV; then true or false

/** Parse CSV text (RFC 4180 quoting, CRLF or LF) into rows of trimmed cells, with line numbers. */
export function parseCsv(text) {
  const rows = [];
  let row = [];
  let cell = "";
  let quoted = false;
  let line = 1;
  let rowLine = 1;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i += 1;
      } else if (c === '"') quoted = false;
      else {
        if (c === "\n") line += 1;
        cell += c;
      }
    } else if (c === '"') quoted = true;
    else if (c === ",") {
      row.push(cell.trim());
      cell = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i += 1;
      row.push(cell.trim());
      if (row.some((v) => v !== "")) rows.push({ line: rowLine, cells: row });
      row = [];
      cell = "";
      line += 1;
      rowLine = line;
    } else cell += c;
  }
  row.push(cell.trim());
  if (row.some((v) => v !== "")) rows.push({ line: rowLine, cells: row });
  return rows;
}

const YES = new Set(["1", "yes", "y", "true"]);
const NO = new Set(["0", "no", "n", "false"]);

/** Check one CSV value against the public bounds; returns [value, error]. */
function csvValue(feature, raw) {
  if (raw === "") return [null, `${feature.name}: missing`];
  if (feature.type === "binary") {
    const lower = raw.toLowerCase();
    if (YES.has(lower)) return [1, null];
    if (NO.has(lower)) return [0, null];
    return [null, `${feature.name}: "${raw}" is not 0/1 or yes/no`];
  }
  const value = Number(raw);
  if (!Number.isFinite(value) || !Number.isInteger(value)) {
    return [null, `${feature.name}: "${raw}" is not a whole number`];
  }
  if (value < feature.minimum || value > feature.maximum) {
    return [null, `${feature.name}: ${raw} is outside the allowed range `
      + `[${feature.minimum}, ${feature.maximum}]`];
  }
  return [value, null];
}

/** Turn CSV text into patients (or row errors); header problems throw. */
function readPatients(text) {
  const rows = parseCsv(text);
  if (rows.length < 2) throw new Error("Give a header row and at least one patient row.");
  const header = rows[0].cells.map((c) => c.toLowerCase());
  const missing = FEATURES.filter((f) => !header.includes(f.name)).map((f) => f.name);
  if (missing.length) throw new Error(`The header lacks the column(s): ${missing.join(", ")}.`);
  const idColumn = header.indexOf("id");
  return rows.slice(1).map((row) => {
    const features = {};
    const errors = [];
    for (const feature of FEATURES) {
      const [value, error] = csvValue(feature, row.cells[header.indexOf(feature.name)] ?? "");
      if (error) errors.push(error);
      else features[feature.name] = value;
    }
    const id = idColumn >= 0 ? row.cells[idColumn] ?? "" : "";
    return { line: row.line, id, features, error: errors.join("; ") || null };
  });
}

function problemText(problem, status) {
  if (problem?.errors?.length) {
    return problem.errors.map((e) => `${e.field}: ${errorMessage(e)}`).join(" ");
  }
  return problem?.detail || `the service answered ${status}`;
}

/** Copy one scored result (or its per-row error) onto a patient. */
function settle(patient, result) {
  if (result && typeof result.probability === "number") patient.answer = result;
  else patient.error = problemText(result?.error || result, result?.status);
}

/**
 * Score with the batch endpoint; false when the service has none (404 from no route, or 405).
 * The batch is validated as a whole: rows it refuses (patients.3.features.phq9) get their
 * error and the others are sent once more without them.
 */
async function scoreWithBatch(patients, modelId, retry = true) {
  const body = { patients: patients.map((p) => ({ id: p.id || undefined,
    features: p.features })) };
  if (modelId) body.model_id = modelId;
  const answer = await request("POST", "v1/risk/batch", body);
  const missingRoute = answer.status === 405
    || (answer.status === 404 && String(answer.data?.type || "").endsWith("/http-error"));
  if (missingRoute) return false;
  if (!answer.ok) {
    const byRow = new Map();
    for (const error of answer.data?.errors || []) {
      const match = /^patients\.(\d+)\.(.*)$/.exec(error.field || "");
      if (match) byRow.set(Number(match[1]), `${match[2]}: ${errorMessage(error)}`);
    }
    patients.forEach((p, i) => {
      p.error = byRow.get(i) || (byRow.size ? null : problemText(answer.data, answer.status));
    });
    const rest = patients.filter((p) => !p.error);
    if (rest.length && retry) return scoreWithBatch(rest, modelId, false);
    for (const p of rest) p.error = "not scored: the service refused the batch twice";
    return true;
  }
  // The batch answer names its model (and reference) once, not in every result.
  const { results = [], model = null } = answer.data || {};
  patients.forEach((p, i) => settle(p, results[i] && model ? { model, ...results[i] }
    : results[i]));
  return true;
}

async function scoreOneByOne(patients, modelId) {
  for (const [i, patient] of patients.entries()) {
    if (i >= FALLBACK_LIMIT) {
      patient.error = `not scored: at most ${FALLBACK_LIMIT} rows without the batch endpoint`;
      continue;
    }
    const body = { features: patient.features };
    if (modelId) body.model_id = modelId;
    const answer = await request("POST", "v1/risk", body);
    if (answer.ok) patient.answer = answer.data;
    else patient.error = problemText(answer.data, answer.status);
  }
}

function topReason(answer) {
  const raising = answer.contributions.find((c) => c.direction === "raises");
  const item = raising || answer.contributions[0];
  if (!item) return "\u2014";
  return `${item.reason} (${item.direction}, ${points(item.contribution_probability)} points)`;
}

function resultsTable(patients, modelText) {
  const scored = patients.filter((p) => p.answer).length;
  const rows = patients.map((p) => {
    const cells = [
      h("td", { className: "num", text: p.line }),
      h("td", { text: p.id || "\u2014" }),
    ];
    if (p.answer) {
      cells.push(
        h("td", { className: "num", text: percent(p.answer.probability) }),
        h("td", {}, badge(p.answer.band, true)),
        h("td", { text: topReason(p.answer) }),
      );
    } else {
      cells.push(h("td", { colspan: 3, className: "row-error", text: `Error: ${p.error}` }));
    }
    return h("tr", { className: p.answer ? "scored" : "refused" }, cells);
  });
  const head = ["Line", "ID", "Probability", "Band", "Main reason"].map((t) =>
    h("th", { scope: "col", text: t }));
  return h(
    "table",
    { id: "csv-table" },
    h("caption", { id: "csv-caption", tabindex: "-1",
      text: `Scored ${scored} of ${patients.length} rows${modelText}` }),
    h("thead", {}, h("tr", {}, head)),
    h("tbody", {}, rows),
  );
}

async function onCsv(event) {
  event.preventDefault();
  const output = document.getElementById("csv-result");
  const textarea = document.getElementById("csv-text");
  const errorNode = document.getElementById("csv-error");
  clearErrors(event.currentTarget);
  let patients;
  try {
    patients = readPatients(textarea.value);
    if (patients.length > BATCH_LIMIT) {
      throw new Error(`At most ${BATCH_LIMIT} rows at once; this CSV has ${patients.length}.`);
    }
  } catch (error) {
    markField(textarea, errorNode, error.message);
    output.replaceChildren();
    textarea.focus();
    return;
  }
  const modelValue = document.getElementById("model-select").value;
  const modelId = modelValue ? Number(modelValue) : null;
  output.replaceChildren(h("p", { text: `Scoring ${patients.length} rows\u2026` }));
  const valid = patients.filter((p) => !p.error);
  try {
    if (valid.length) {
      let done = false;
      if (batchAvailable !== false) {
        done = await scoreWithBatch(valid, modelId);
        batchAvailable = done;
      }
      if (!done) await scoreOneByOne(valid, modelId);
    }
  } catch (error) {
    for (const p of valid) if (!p.answer) p.error = `service unreachable (${error.message})`;
  }
  const used = patients.find((p) => p.answer?.model)?.answer.model.id;
  const table = resultsTable(patients, used ? ` with model ${used}` : "");
  output.replaceChildren(h("div", { className: "table-wrap" }, table));
  table.querySelector("caption").focus();
}

function onCsvFile(event) {
  const file = event.currentTarget.files?.[0];
  if (!file) return;
  const reader = new FileReader();
  reader.addEventListener("load", () => {
    const textarea = document.getElementById("csv-text");
    textarea.value = String(reader.result);
    document.getElementById("csv-result").replaceChildren(
      h("p", { text: `Loaded ${file.name}; press "Score all rows".` }));
  });
  reader.readAsText(file);
}

/** Wire the CSV form to the feature spec the scoring page loaded. */
export function initCsv(features) {
  FEATURES = features;
  document.getElementById("csv-form").addEventListener("submit", onCsv);
  document.getElementById("csv-file").addEventListener("change", onCsvFile);
}

// CSV scoring on the scoring page: rows are read and checked here against the scoring model's
// schema (public bounds and categories only), then scored with POST /v1/risk/batch in its
// compact view (probability, band and top contributions: all the table shows, a fraction of the
// full answer's bytes), or one by one with POST /v1/risk where the service has no batch endpoint
// (404/405), at most FALLBACK_LIMIT rows. The columns follow the model the form shows (csv.js); a template and the
// results can be downloaded as CSV in the same columns. Rows never leave the page otherwise.

import { topReason } from "./chart.js";
import { badge, clearErrors, errorMessage, h, markField, percent, request } from "./common.js";
import { columnsOf, idColumnOf, place, readPatients, toCsv } from "./csv.js";
import { requirementText } from "./schema.js";

const BATCH_LIMIT = 10000;
const FALLBACK_LIMIT = 200;
let context = null; // scoring.js: confirm(), whyNot(), features()
let batchAvailable = null; // unknown until the first CSV; then true or false
const links = new Map(); // link id -> its blob URL (revoked when replaced)

const byId = (id) => document.getElementById(id);

/** Point a download link at CSV text (a blob of this page; nothing is sent anywhere). */
function offer(link, rows, filename) {
  const old = links.get(link.id);
  if (old) URL.revokeObjectURL(old);
  const url = URL.createObjectURL(new Blob([toCsv(rows)], { type: "text/csv;charset=utf-8" }));
  links.set(link.id, url);
  link.setAttribute("href", url);
  link.setAttribute("download", filename);
  link.hidden = false;
}

/** The CSV help follows the form's model: its columns and a template with the reference. */
function columnsShown(model, features) {
  const template = byId("csv-template");
  const idName = idColumnOf(model?.schema);
  byId("csv-columns").textContent = model ? columnsOf(features, idName).join(",")
    : "(no model chosen)";
  if (!model) {
    template.hidden = true;
    return;
  }
  const reference = ["reference-patient", ...features.map((f) => f.reference)];
  offer(template, [columnsOf(features, idName), reference], `patients-model-${model.id}.csv`);
}

/** An API error in a clinician's words where it names a feature of the form's model. */
function errorText(error) {
  const name = /^(?:patients\.\d+\.)?features\.(\w+)$/.exec(error.field || "")?.[1];
  const feature = name && context?.features().find((f) => f.name === name);
  return feature ? requirementText(feature) : `${error.field}: ${errorMessage(error)}`;
}

function problemText(problem, status) {
  if (problem?.errors?.length) return problem.errors.map(errorText).join(" ");
  return problem?.detail || `the service answered ${status}`;
}

/** Copy one scored result (or its per-row error) onto a patient. */
function settle(patient, result) {
  if (result && typeof result.probability === "number") patient.answer = result;
  else patient.error = problemText(result?.error || result, result?.status);
}

/** The API's errors of a refused batch, by the index of the patient sent. */
function errorsByRow(patients, problem) {
  const byRow = new Map();
  for (const error of problem?.errors || []) {
    const match = /^patients\.(\d+)\.(?:features\.)?(.*)$/.exec(error.field || "");
    const patient = match && patients[Number(match[1])];
    if (!patient) continue;
    const feature = context?.features().find((f) => f.name === match[2]);
    const text = `${place(patient, match[2])}: ${feature ? requirementText(feature)
      : errorMessage(error)}`;
    byRow.set(Number(match[1]), byRow.has(Number(match[1]))
      ? `${byRow.get(Number(match[1]))}; ${text}` : text);
  }
  return byRow;
}

/**
 * Score with the batch endpoint; false when the service has none (404 from no route, or 405).
 * The batch is validated as a whole: rows it refuses (patients.3.features.phq9) get their
 * error and the others are sent once more without them.
 */
async function scoreWithBatch(patients, modelId, retry = true) {
  const body = { model_id: modelId, patients: patients.map((p) => ({ id: p.id || undefined,
    features: p.features })) };
  const answer = await request("POST", "v1/risk/batch?view=compact", body);
  const missingRoute = answer.status === 405
    || (answer.status === 404 && String(answer.data?.type || "").endsWith("/http-error"));
  if (missingRoute) return false;
  if (!answer.ok) {
    const byRow = errorsByRow(patients, answer.data);
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
    const answer = await request("POST", "v1/risk", { features: patient.features,
      model_id: modelId });
    if (answer.ok) patient.answer = answer.data;
    else patient.error = problemText(answer.data, answer.status);
  }
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

/** The results as CSV: the columns sent, then what came back (or the row's error). */
function resultRows(patients, features, modelId, idName) {
  const head = [...columnsOf(features, idName), "probability", "band", "main_reason", "model_id",
    "error"];
  return [head, ...patients.map((p) => [
    p.id, ...features.map((f) => p.features[f.name]),
    p.answer?.probability, p.answer?.band, p.answer ? topReason(p.answer) : null,
    p.answer ? modelId : null, p.error,
  ])];
}

function showResults(patients, features, target, ignored, idName) {
  const used = patients.find((p) => p.answer?.model)?.answer.model.id;
  const table = resultsTable(patients, used ? ` with model ${used}` : "");
  const download = h("a", { id: "csv-download", className: "download" },
    "Download the results (CSV)");
  offer(download, resultRows(patients, features, target.id, idName),
    `risk-scores-model-${target.id}.csv`);
  const note = ignored.length
    ? h("p", { id: "csv-ignored", className: "help", text: `Columns not in model ${target.id}'s `
      + `schema, not sent: ${ignored.join(", ")}.` })
    : null;
  byId("csv-result").replaceChildren(note, h("div", { className: "table-wrap" }, table),
    h("p", {}, download));
  table.querySelector("caption").focus();
}

function refuse(message) {
  const textarea = byId("csv-text");
  markField(textarea, byId("csv-error"), message);
  byId("csv-result").replaceChildren();
  textarea.focus();
}

async function scoreAll(patients, modelId) {
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
}

async function onCsv(event) {
  event.preventDefault();
  clearErrors(event.currentTarget);
  byId("csv-result").replaceChildren(h("p", { text: "Checking the model\u2026" }));
  let target;
  let read;
  try {
    target = await context.confirm();
    if (!target) {
      refuse(context.whyNot());
      return;
    }
    read = readPatients(byId("csv-text").value, context.features(), context.idColumn());
    if (read.patients.length > BATCH_LIMIT) {
      throw new Error(`At most ${BATCH_LIMIT} rows at once; this CSV has `
        + `${read.patients.length}.`);
    }
  } catch (error) {
    refuse(error.message);
    return;
  }
  byId("csv-result").replaceChildren(h("p", { text: `Scoring ${read.patients.length} rows\u2026` }));
  await scoreAll(read.patients, target.id);
  showResults(read.patients, context.features(), target, read.ignored, context.idColumn());
}

function onCsvFile(event) {
  const file = event.currentTarget.files?.[0];
  if (!file) return;
  const reader = new FileReader();
  reader.addEventListener("load", () => {
    byId("csv-text").value = String(reader.result);
    byId("csv-result").replaceChildren(
      h("p", { text: `Loaded ${file.name}; press "Score all rows".` }));
  });
  reader.readAsText(file);
}

/** Wire the CSV form; returns what scoring.js calls when the form's model changes. */
export function initCsv(scoringContext) {
  context = scoringContext;
  byId("csv-form").addEventListener("submit", onCsv);
  byId("csv-file").addEventListener("change", onCsvFile);
  return columnsShown;
}

// The scoring page: a form built from the feature spec, one patient's result (band, probability,
// contribution chart, privacy statement), field errors from the API; CSV scoring is csv.js.

import {
  badge,
  clearErrors,
  dateText,
  deltaText,
  epsilonText,
  errorMessage,
  getJSON,
  h,
  initApiKey,
  markField,
  percent,
  points,
  reportHref,
  request,
  setStatus,
} from "./common.js";
import { initCsv } from "./csv.js";

// ---------------------------------------------------------------------------------------------
// The form

let FEATURES = [];
let MODELS = [];

function fieldId(name) {
  return `f-${name}`;
}

function featureField(feature) {
  const id = fieldId(feature.name);
  const helpId = `${id}-help`;
  const errorId = `${id}-error`;
  const unit = feature.unit ? h("span", { className: "unit" }, ` (${feature.unit})`) : null;
  const label = h("label", { for: id }, feature.label, unit);
  let control;
  let help;
  if (feature.type === "binary") {
    control = h(
      "select",
      { id, name: feature.name, "aria-describedby": helpId, autocomplete: "off" },
      h("option", { value: "", text: "Choose\u2026" }),
      h("option", { value: "0", text: "No" }),
      h("option", { value: "1", text: "Yes" }),
    );
    help = `No (0) or Yes (1). Reference patient: ${feature.reference >= 0.5 ? "Yes" : "No"}.`;
  } else {
    control = h("input", {
      id,
      name: feature.name,
      type: "number",
      inputmode: "numeric",
      min: feature.minimum,
      max: feature.maximum,
      step: 1,
      autocomplete: "off",
      "aria-describedby": helpId,
    });
    help = `Whole number from ${feature.minimum} to ${feature.maximum}. `
      + `Reference patient: ${feature.reference}.`;
  }
  if (feature.loinc) help += ` LOINC ${feature.loinc}.`;
  return h(
    "div",
    { className: "field", "data-feature": feature.name },
    label,
    control,
    h("p", { id: helpId, className: "help", text: help }),
    h("p", { id: errorId, className: "field-error", hidden: true }),
  );
}

function buildForm() {
  const container = document.getElementById("feature-fields");
  container.replaceChildren(...FEATURES.map(featureField));
  const columns = document.getElementById("csv-columns");
  if (columns) columns.textContent = ["id", ...FEATURES.map((f) => f.name)].join(",");
}

function modelOption(model) {
  const privacy = model.privacy || {};
  const eps = epsilonText(privacy.epsilon, privacy.non_private);
  const text = `Model ${model.id}${model.active ? " (active)" : ""}: ${model.kind}, dataset `
    + `${model.dataset_id}, \u03B5 ${eps}, \u03B4 ${deltaText(privacy.delta)}, `
    + `trained ${dateText(model.created_at)}`;
  return h("option", { value: model.id, text });
}

async function loadModels() {
  const page = await getJSON("v1/models?limit=200");
  MODELS = page.items || [];
  const select = document.getElementById("model-select");
  select.append(...MODELS.map(modelOption));
}

function controlFor(field) {
  if (field === "model_id") return document.getElementById("model-select");
  const match = /^features\.(\w+)$/.exec(field || "");
  return match ? document.getElementById(fieldId(match[1])) : null;
}

function labelFor(field) {
  const match = /^features\.(\w+)$/.exec(field || "");
  const feature = match && FEATURES.find((f) => f.name === match[1]);
  if (feature) return feature.label;
  return field === "model_id" ? "Model" : field || "Request";
}

function showProblem(form, result, problem, status) {
  const errors = problem?.errors?.length
    ? problem.errors
    : [{ field: null, message: problem?.detail || `The service answered ${status}.` }];
  const items = errors.map((error) => {
    const message = errorMessage(error);
    const control = controlFor(error.field);
    if (control) {
      markField(control, document.getElementById(`${control.id}-error`), message);
      return h("li", {}, h("a", { href: `#${control.id}` }, `${labelFor(error.field)}: `
        + message));
    }
    return h("li", {}, `${labelFor(error.field)}: ${message}`);
  });
  const heading = h("h3", { id: "result-heading", tabindex: "-1", text: "Not scored" });
  result.replaceChildren(
    h("div", { className: "problem" }, heading,
      h("p", { text: problem?.title || "The request was refused." }), h("ul", {}, items)),
  );
  heading.focus();
}

function readFeatures(form) {
  const features = {};
  for (const feature of FEATURES) {
    const control = form.elements.namedItem(feature.name);
    const raw = control.value.trim();
    if (raw !== "") features[feature.name] = Number(raw);
  }
  return features;
}

// ---------------------------------------------------------------------------------------------
// The result

function thresholdText(probability, thresholds, band) {
  const lowMedium = percent(thresholds.low_medium);
  const mediumHigh = percent(thresholds.medium_high);
  const why = {
    low: `${percent(probability)} is below ${lowMedium}`,
    medium: `${percent(probability)} is at or above ${lowMedium} and below ${mediumHigh}`,
    high: `${percent(probability)} is at or above ${mediumHigh}`,
  }[band];
  return `Bands of this model: low below ${lowMedium}, medium from ${lowMedium} to below `
    + `${mediumHigh}, high from ${mediumHigh}. ${why}, so the band is ${band}.`;
}

function barRow(item, largest) {
  const value = item.contribution_probability;
  const direction = value > 0 ? "raises" : value < 0 ? "lowers" : "neutral";
  const bar = h("span", { className: "bar" });
  bar.style.width = `${largest > 0 ? (Math.abs(value) / largest) * 100 : 0}%`;
  const track = h(
    "span",
    { className: "bar-track", "aria-hidden": "true" },
    h("span", { className: "bar-half neg" }, value < 0 ? bar : null),
    h("span", { className: "bar-half pos" }, value > 0 ? bar : null),
  );
  const arrow = { raises: "\u25B6 ", lowers: "\u25C0 ", neutral: "" }[direction];
  const word = { raises: "raises", lowers: "lowers", neutral: "no effect" }[direction];
  return h(
    "li",
    { className: `bar-row ${direction}`, "data-feature": item.feature },
    h("span", { className: "bar-reason", text: item.reason }),
    track,
    h(
      "span",
      { className: "bar-value" },
      h("span", { className: "dir" }, h("span", { "aria-hidden": "true", text: arrow }), word),
      ` ${points(value)} points`,
    ),
  );
}

function contributionChart(answer) {
  const items = answer.contributions;
  const largest = Math.max(...items.map((c) => Math.abs(c.contribution_probability)));
  const reference = percent(answer.reference.probability);
  return h(
    "figure",
    { className: "chart", "aria-labelledby": "chart-caption" },
    h(
      "figcaption",
      { id: "chart-caption" },
      "How much each feature moved the probability, in percentage points, compared with the "
        + `public reference patient (${reference}); exact Shapley values, largest first, adding `
        + `up to ${percent(answer.probability)} \u2212 ${reference}. Solid bars to the right `
        + "raise the risk; hatched bars to the left lower it.",
    ),
    h("ol", { className: "bars", role: "list" }, items.map((item) => barRow(item, largest))),
  );
}

function privacyStatement(model) {
  const info = MODELS.find((m) => m.id === model.id);
  const trained = `${model.kind} model ${model.id}, trained ${dateText(model.trained_at)} on `
    + `dataset ${model.dataset_id}`;
  let text;
  if (model.non_private) {
    text = `The ${trained}, was trained without differential privacy (\u03B5 = \u221E): its `
      + "scores carry no privacy guarantee for the patients it was trained on.";
  } else {
    const rdp = model.epsilon_rdp === null || model.epsilon_rdp === undefined
      ? ""
      : ` (the RDP accountant gives \u03B5 = ${epsilonText(model.epsilon_rdp)})`;
    text = `The ${trained}, satisfies (\u03B5 = ${epsilonText(model.epsilon)}, \u03B4 = `
      + `${deltaText(model.delta)})-differential privacy per ${model.unit} by the `
      + `${String(model.accountant).toUpperCase()} accountant${rdp}. The guarantee covers the `
      + "model and everything computed from it alone, this score included.";
  }
  const link = info?.job_id
    ? h("a", { href: reportHref(`v1/jobs/${info.job_id}/privacy-report`) },
      `Privacy report of job ${info.job_id} (\u03B5 per epoch, model card)`)
    : null;
  return h("div", { className: "statement", id: "privacy-statement" },
    h("p", { text }), link ? h("p", {}, link) : null);
}

function renderResult(result, answer) {
  const heading = h("h3", { id: "result-heading", tabindex: "-1", text: "Result" });
  result.replaceChildren(
    heading,
    h(
      "div",
      { className: "summary-line" },
      badge(answer.band),
      h(
        "p",
        { className: "probability", id: "probability" },
        h("strong", { text: percent(answer.probability) }),
        " probability of a crisis within 30 days",
      ),
    ),
    h("p", { id: "thresholds", text: thresholdText(answer.probability, answer.band_thresholds,
      answer.band) }),
    h("h4", { text: "What contributed" }),
    contributionChart(answer),
    h("h4", { text: "Model and privacy" }),
    privacyStatement(answer.model),
    h("p", { className: "note", text: "Decision support, not a diagnosis: the model sees six "
      + "features only, and crisis risk depends on much it does not see." }),
  );
  heading.focus();
}

async function onScore(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const result = document.getElementById("result");
  const button = document.getElementById("score-button");
  clearErrors(form);
  const body = { features: readFeatures(form) };
  const model = form.elements.namedItem("model_id").value;
  if (model) body.model_id = Number(model);
  result.setAttribute("aria-busy", "true");
  button.setAttribute("aria-disabled", "true");
  try {
    const answer = await request("POST", "v1/risk", body);
    if (answer.ok) renderResult(result, answer.data);
    else showProblem(form, result, answer.data, answer.status);
  } catch (error) {
    showProblem(form, result, { detail: `The service could not be reached (${error.message}).` });
  } finally {
    result.removeAttribute("aria-busy");
    button.removeAttribute("aria-disabled");
  }
}

function onReset(event) {
  clearErrors(event.currentTarget);
  const result = document.getElementById("result");
  result.replaceChildren(h("p", { className: "placeholder",
    text: "Enter the patient's features and press Score (or Enter)." }));
}

async function initScoring() {
  if (!initApiKey()) return; // every API call needs the key: ask for it first
  const form = document.getElementById("patient-form");
  form.addEventListener("submit", onScore);
  form.addEventListener("reset", onReset);
  try {
    FEATURES = await getJSON("v1/features");
    buildForm();
  } catch (error) {
    setStatus(`The feature list could not be loaded: ${error.message}`);
    return;
  }
  initCsv(FEATURES);
  try {
    await loadModels();
  } catch (error) {
    setStatus(`The model list could not be loaded (${error.message}); scoring uses the active `
      + "model.");
  }
  document.body.dataset.ready = "true";
}

initScoring();

// The scoring page: which model scores (the active one, or one chosen from the list), a form
// built from that model's declared schema, one patient's result and field errors from the API;
// CSV scoring is batch.js.
//
// The form follows the model: GET /v1/models/active (schema included) builds it, choosing
// another model rebuilds it from that model's schema, and the active model is fetched again
// before each score and whenever the tab comes back into view, so a model activated meanwhile
// is noticed before a patient is sent to it. Scores name the model whose form was filled in
// (model_id), so a patient is never scored by a model whose features the page did not show.

import { initCsv } from "./batch.js";
import { idColumnOf } from "./csv.js";
import {
  clearErrors,
  dateText,
  deltaText,
  epsilonText,
  errorMessage,
  getJSON,
  h,
  initApiKey,
  markField,
  request,
  setStatus,
} from "./common.js";
import { renderResult } from "./result.js";
import {
  featureErrorText,
  featureField,
  featuresOf,
  outcomeText,
  readForm,
} from "./schema.js";

const PLACEHOLDER = "Enter the patient's features and press Score (or Enter).";
const state = {
  active: null, // GET /v1/models/active, or null when none is
  activeStatus: null, // why none is: 404 (no model trained) or 409 (none activated)
  models: [], // GET /v1/models
  shown: null, // the model whose schema the form shows
  features: [], // that schema's features (schema.js featuresOf)
  notice: "", // why the last check found nothing to score with
  columnsShown: () => {}, // batch.js: the CSV columns follow the form
};

const byId = (id) => document.getElementById(id);

// ---------------------------------------------------------------------------------------------
// Models: the active one and the list

async function loadActive() {
  const answer = await request("GET", "v1/models/active");
  if (answer.ok) {
    state.active = answer.data;
    state.activeStatus = null;
  } else if (answer.status === 404 || answer.status === 409) {
    state.active = null;
    state.activeStatus = answer.status;
  } else {
    throw new Error(answer.data?.detail || `v1/models/active answered ${answer.status}`);
  }
}

async function loadModels() {
  const page = await getJSON("v1/models?limit=200");
  state.models = page.items || [];
}

function modelOption(model) {
  const privacy = model.privacy || {};
  const eps = epsilonText(privacy.epsilon, privacy.non_private);
  const active = model.id === state.active?.id;
  const text = `Model ${model.id}${active ? " (active)" : ""}: ${model.kind}, dataset `
    + `${model.dataset_id}, \u03B5 ${eps}, \u03B4 ${deltaText(privacy.delta)}, `
    + `trained ${dateText(model.created_at)}`
    + (model.training_rows_erased_at
      ? `; training rows erased ${dateText(model.training_rows_erased_at)} (the model remains)`
      : "");
  return h("option", { value: model.id, text });
}

function fillModelSelect() {
  const select = byId("model-select");
  const chosen = select.value;
  const activeText = state.active
    ? `Active model (now model ${state.active.id})` : "Active model (none is active)";
  select.replaceChildren(h("option", { value: "", text: activeText }),
    ...state.models.map(modelOption));
  select.value = state.models.some((m) => String(m.id) === chosen) ? chosen : "";
}

function chosenModel() {
  const value = byId("model-select").value;
  if (value === "") return state.active;
  return state.models.find((m) => String(m.id) === value) || null;
}

function modelInfo(id) {
  return [state.shown, state.active, ...state.models].find((m) => m?.id === id) || null;
}

// ---------------------------------------------------------------------------------------------
// The form follows the chosen model's schema

function currentValues() {
  const values = {};
  for (const feature of state.features) {
    const control = byId(`f-${feature.name}`);
    if (control) values[feature.name] = control.value;
  }
  return values;
}

function noModelText() {
  if (byId("model-select").value !== "") return "The chosen model is not available any more.";
  if (state.activeStatus === 404) {
    return "No model has been trained yet, so there is nothing to score with. A data "
      + "scientist trains one; the first model stored becomes active.";
  }
  return "No model is active, so there is no form to fill in yet. Choose a trained model in "
    + "the Model list above, or ask a data scientist to activate one.";
}

function showNoModel() {
  state.shown = null;
  state.features = [];
  byId("feature-fields").replaceChildren(
    h("p", { id: "no-model", className: "notice", text: noModelText() }));
  byId("model-summary").textContent = "";
  byId("score-button").setAttribute("aria-disabled", "true");
  state.columnsShown(null, []);
}

function describeModel(model) {
  const labels = state.features.map((f) => f.label).join(", ");
  byId("model-summary").textContent = `Model ${model.id} (${model.kind}) gives the probability `
    + `of ${outcomeText(model.schema)} from ${state.features.length} features: ${labels}.`;
}

/** Build the form for the chosen model: "same" schema as before, "changed", or "none". */
function showForm() {
  const model = chosenModel();
  if (!model) {
    showNoModel();
    return "none";
  }
  const same = state.shown !== null && state.shown.schema_hash === model.schema_hash;
  if (!same) {
    const kept = currentValues();
    state.features = featuresOf(model.schema);
    byId("feature-fields").replaceChildren(
      ...state.features.map((f) => featureField(f, kept[f.name])));
  }
  state.shown = model;
  describeModel(model);
  byId("score-button").removeAttribute("aria-disabled");
  state.columnsShown(model, state.features);
  return same ? "same" : "changed";
}

/**
 * The model to score with, after fetching the active one again when it is the one chosen.
 * Null when there is none, or when it changed to one with other features (the form follows
 * it, and the page says so: the values must be checked before a score).
 */
async function confirmTarget() {
  state.notice = "";
  if (byId("model-select").value !== "") return state.shown;
  const before = state.active?.id ?? null;
  await loadActive();
  const after = state.active?.id ?? null;
  if (after === before) return state.shown;
  try {
    await loadModels();
  } catch {
    // the list only labels the choices; the active model itself is known
  }
  fillModelSelect();
  const outcome = showForm();
  if (outcome === "none") state.notice = `No model is active any more. ${noModelText()}`;
  else if (outcome === "changed") {
    state.notice = `The active model is now model ${after}, which scores other features: the `
      + "form now follows it. Check the values, then score again.";
  }
  setStatus(state.notice || `The active model is now model ${after}, with the same features.`);
  return outcome === "same" ? state.shown : null;
}

/** Why confirmTarget found nothing to score with. */
function whyNot() {
  return state.notice || noModelText();
}

// ---------------------------------------------------------------------------------------------
// Errors and scoring

function controlFor(field) {
  if (field === "model_id") return byId("model-select");
  const match = /^features\.(\w+)$/.exec(field || "");
  return match ? byId(`f-${match[1]}`) : null;
}

function featureFor(field) {
  const match = /^features\.(\w+)$/.exec(field || "");
  return (match && state.features.find((f) => f.name === match[1])) || null;
}

function labelFor(field) {
  return field === "model_id" ? "Model" : field || "Request";
}

/** One error as the page words it: a feature's in clinical terms ("PHQ-9 must be a whole
 * number from 0 to 27 points. You entered 30."), anything else as the API's message. */
function errorText(error, control) {
  const feature = featureFor(error.field);
  if (feature) return featureErrorText(feature, error, control?.value || "");
  return `${labelFor(error.field)}: ${errorMessage(error)}`;
}

function showProblem(result, problem, status) {
  const errors = problem?.errors?.length
    ? problem.errors
    : [{ field: null, message: problem?.detail || `The service answered ${status}.` }];
  const items = errors.map((error) => {
    const control = controlFor(error.field);
    const message = errorText(error, control);
    if (control) {
      markField(control, byId(`${control.id}-error`), message);
      return h("li", {}, h("a", { href: `#${control.id}` }, message));
    }
    return h("li", {}, message);
  });
  const onFeatures = errors.some((e) => featureFor(e.field));
  const title = onFeatures ? "Some values are outside what the model accepts; correct them "
    + "and score again." : problem?.title || "The request was refused.";
  const heading = h("h3", { id: "result-heading", tabindex: "-1", text: "Not scored" });
  result.replaceChildren(
    h("div", { className: "problem" }, heading, h("p", { text: title }), h("ul", {}, items)),
  );
  heading.focus();
}

async function scoreForm(form, result) {
  const target = await confirmTarget();
  if (!target) {
    showProblem(result, { title: "Not sent.", detail: whyNot() });
    return;
  }
  const { values, errors } = readForm(form, state.features);
  if (errors.length) {
    showProblem(result, { title: "Some values are not numbers.", errors });
    return;
  }
  const answer = await request("POST", "v1/risk", { features: values, model_id: target.id });
  if (answer.ok) renderResult(result, answer.data, modelInfo(answer.data.model.id));
  else showProblem(result, answer.data, answer.status);
}

async function onScore(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const result = byId("result");
  const button = byId("score-button");
  if (result.getAttribute("aria-busy") === "true") return;
  clearErrors(form);
  setStatus("");
  result.setAttribute("aria-busy", "true");
  button.setAttribute("aria-disabled", "true");
  try {
    await scoreForm(form, result);
  } catch (error) {
    showProblem(result, { detail: `The service could not be reached (${error.message}).` });
  } finally {
    result.removeAttribute("aria-busy");
    if (state.shown) button.removeAttribute("aria-disabled");
  }
}

function placeholder() {
  byId("result").replaceChildren(h("p", { className: "placeholder", text: PLACEHOLDER }));
}

function onReset(event) {
  clearErrors(event.currentTarget);
  placeholder();
}

function onModelChange() {
  clearErrors(byId("patient-form"));
  if (showForm() !== "same") placeholder();
}

async function onVisible() {
  if (document.visibilityState !== "visible" || !state.shown) return;
  try {
    await confirmTarget();
  } catch {
    // checked again before the next score
  }
}

async function initScoring() {
  if (!initApiKey()) return; // every API call needs the key: ask for it first
  const form = byId("patient-form");
  form.addEventListener("submit", onScore);
  form.addEventListener("reset", onReset);
  byId("model-select").addEventListener("change", onModelChange);
  document.addEventListener("visibilitychange", onVisible);
  const [active, list] = await Promise.allSettled([loadActive(), loadModels()]);
  if (active.status === "rejected") {
    setStatus(`The active model could not be loaded: ${active.reason.message}`);
    return;
  }
  if (list.status === "rejected") {
    setStatus(`The model list could not be loaded (${list.reason.message}); scoring uses the `
      + "active model.");
  }
  state.columnsShown = initCsv({ confirm: confirmTarget, whyNot,
    features: () => state.features, idColumn: () => idColumnOf(state.shown?.schema) });
  fillModelSelect();
  showForm();
  document.body.dataset.ready = "true";
}

initScoring();

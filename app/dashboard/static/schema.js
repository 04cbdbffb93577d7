// A model's declared schema as the scoring page uses it: one form field per feature, the values
// a CSV cell may hold, and how a value is shown. The schema comes with the model
// (GET /v1/models/active or /v1/models: "schema"), so the form, the CSV columns and the
// explanation labels always follow the model that scores; nothing here names a feature.
//
// Bounds, categories and reference values are the schema's public declarations. The form checks
// only what a browser can tell by itself (a number that is not one); the API checks the rest
// and its errors are shown next to their fields. A feature the schema declares
// "missing": "reference" may be left blank (a CSV cell too): the API then scores it at its
// reference value and says so.

import { h } from "./common.js";

/** The features of a declared schema, in declaration order (the order of the CSV columns). */
export function featuresOf(schema) {
  return (schema?.features || []).map((f) => ({
    name: f.name,
    label: f.label || f.name,
    unit: f.unit || "",
    kind: f.kind,
    lower: f.kind === "binary" ? 0 : f.lower,
    upper: f.kind === "binary" ? 1 : f.upper,
    modelLower: f.model_lower ?? null,
    modelUpper: f.model_upper ?? null,
    categories: f.categories || [],
    reference: f.reference,
    code: f.code || null,
    imputable: f.missing === "reference",
  }));
}

/** What the outcome of a schema is called, inside a sentence: its label ("Readmission within
 * 90 days" reads "readmission within 90 days"), else its column's name. */
export function outcomeText(schema) {
  const outcome = schema?.outcome || {};
  const text = outcome.label || outcome.name || "the outcome";
  return text.length > 1 && text[1] === text[1].toLowerCase()
    ? text[0].toLowerCase() + text.slice(1) : text;
}

/** The allowed values, as the API's errors word them: "[0, 27]", "0 or 1", "one of ...". */
export function allowedText(feature) {
  if (feature.kind === "binary") return "0 or 1";
  if (feature.kind === "categorical") return `one of ${feature.categories.join(", ")}`;
  return `[${feature.lower}, ${feature.upper}]`;
}

/** What a feature accepts, in a clinician's words: "PHQ-9 must be a whole number from 0 to 27
 * points." (from the schema, so it is the same for every error the API could word). */
export function requirementText(feature) {
  if (feature.kind === "binary") return `${feature.label} must be Yes or No.`;
  if (feature.kind === "categorical") {
    return `${feature.label} must be one of: ${feature.categories.join(", ")}.`;
  }
  const what = feature.kind === "integer" ? "a whole number" : "a number";
  const unit = feature.unit ? ` ${feature.unit}` : "";
  return `${feature.label} must be ${what} from ${feature.lower} to ${feature.upper}${unit}.`;
}

/** An API (or form) error about one feature in a clinician's words, in place of the
 * validator's ("Input should be less than or equal to 27"); ``entered`` is the field's text. */
export function featureErrorText(feature, error, entered = "") {
  if (/required|missing/i.test(error?.message || "") && entered.trim() === "") {
    return `${feature.label} is missing. ${requirementText(feature)}`;
  }
  const shown = entered.trim() && feature.kind !== "binary" && feature.kind !== "categorical"
    ? ` You entered ${entered.trim()}.` : "";
  return `${requirementText(feature)}${shown}`;
}

/** A value as the page shows it: a category as its text, a flag as yes/no, a number as sent. */
export function valueText(feature, value) {
  if (value === null || value === undefined || value === "") return "\u2014";
  if (feature?.kind === "binary") return Number(value) >= 0.5 ? "yes" : "no";
  if (typeof value === "string") return value;
  const unit = feature?.unit ? ` ${feature.unit}` : "";
  return `${value}${unit}`;
}

function codeText(code) {
  if (!code) return "";
  const system = /loinc\.org$/i.test(code.system) ? "LOINC" : "Code";
  return ` ${system} ${code.code}${code.display ? ` (${code.display})` : ""}.`;
}

function referenceText(feature) {
  if (feature.kind === "binary") return Number(feature.reference) >= 0.5 ? "Yes" : "No";
  return String(feature.reference);
}

function helpText(feature) {
  let text;
  if (feature.kind === "binary") text = "No (0) or Yes (1).";
  else if (feature.kind === "categorical") text = `One of: ${feature.categories.join(", ")}.`;
  else {
    const what = feature.kind === "integer" ? "Whole number" : "Number";
    text = `${what} from ${feature.lower} to ${feature.upper}.`;
    if (feature.modelUpper !== null && feature.modelUpper < feature.upper) {
      text += ` Values above ${feature.modelUpper} count as ${feature.modelUpper}.`;
    }
    if (feature.modelLower !== null && feature.modelLower > feature.lower) {
      text += ` Values below ${feature.modelLower} count as ${feature.modelLower}.`;
    }
  }
  const blank = feature.imputable
    ? " May be left blank: it is then scored at the reference patient's value." : "";
  return `${text} Starts at the reference patient's value: ${referenceText(feature)}.${blank}`
    + codeText(feature.code);
}

function selectControl(feature, attrs) {
  const choices = feature.kind === "binary"
    ? [["0", "No"], ["1", "Yes"]]
    : feature.categories.map((c) => [c, c]);
  const reference = feature.kind === "binary"
    ? String(Number(feature.reference) >= 0.5 ? 1 : 0) : String(feature.reference);
  if (feature.imputable) choices.push(["", "Not given (scored at the reference)"]);
  return h("select", attrs, choices.map(([value, text]) =>
    h("option", { value, text, selected: value === reference })));
}

function numberControl(feature, attrs) {
  const whole = feature.kind === "integer";
  return h("input", {
    ...attrs,
    type: "number",
    inputmode: whole ? "numeric" : "decimal",
    min: feature.lower,
    max: feature.upper,
    step: whole ? 1 : "any",
    value: feature.reference, // the default: the form's reset comes back to it
  });
}

/** Whether a value kept from another schema's form fits this feature. */
function fits(feature, value) {
  if (value === "" && feature.imputable) return true;
  if (value === undefined || value === "") return false;
  if (feature.kind === "categorical") return feature.categories.includes(value);
  if (feature.kind === "binary") return value === "0" || value === "1";
  const number = Number(value);
  return Number.isFinite(number) && number >= feature.lower && number <= feature.upper
    && (feature.kind !== "integer" || Number.isInteger(number));
}

/** One labelled field; ``kept`` is the value it had in the previous form, if it fits. */
export function featureField(feature, kept) {
  const id = `f-${feature.name}`;
  const helpId = `${id}-help`;
  const unit = feature.unit ? h("span", { className: "unit" }, ` (${feature.unit})`) : null;
  const attrs = { id, name: feature.name, autocomplete: "off", "aria-describedby": helpId,
    "data-kind": feature.kind };
  const control = feature.kind === "binary" || feature.kind === "categorical"
    ? selectControl(feature, attrs) : numberControl(feature, attrs);
  if (fits(feature, kept)) control.value = kept;
  return h(
    "div",
    { className: "field", "data-feature": feature.name },
    h("label", { for: id }, feature.label, unit),
    control,
    h("p", { id: helpId, className: "help", text: helpText(feature) }),
    h("p", { id: `${id}-error`, className: "field-error", hidden: true }),
  );
}

/**
 * The features of the form, as the risk API takes them (numbers, or a category's text), and
 * the fields the browser already knows are wrong (``[{field, message}]``, as the API's errors).
 */
export function readForm(form, features) {
  const values = {};
  const errors = [];
  for (const feature of features) {
    const control = form.elements.namedItem(feature.name);
    if (!control) continue;
    if (control.validity?.badInput) {
      errors.push({ field: `features.${feature.name}`, message: "not a number",
        allowed: allowedText(feature) });
      continue;
    }
    const raw = control.value.trim();
    if (raw === "") continue; // imputable: scored at the reference; else the API names it
    values[feature.name] = feature.kind === "categorical" ? raw : Number(raw);
  }
  return { values, errors };
}

const YES = new Set(["1", "yes", "y", "true"]);
const NO = new Set(["0", "no", "n", "false"]);

function categoryOf(feature, raw) {
  if (feature.categories.includes(raw)) return raw;
  const folded = feature.categories.filter((c) => c.toLowerCase() === raw.toLowerCase());
  return folded.length === 1 ? folded[0] : null;
}

/** One CSV cell as the API takes it: ``{value}``, or ``{error}`` saying what is wrong. */
export function parseCell(feature, raw) {
  if (raw === "") return feature.imputable ? { value: null } : { error: "missing" };
  if (feature.kind === "binary") {
    const lower = raw.toLowerCase();
    if (YES.has(lower)) return { value: 1 };
    if (NO.has(lower)) return { value: 0 };
    return { error: `"${raw}" is not 0/1 or yes/no` };
  }
  if (feature.kind === "categorical") {
    const category = categoryOf(feature, raw);
    return category === null
      ? { error: `"${raw}" is not ${allowedText(feature)}` } : { value: category };
  }
  const value = Number(raw);
  if (!Number.isFinite(value)) return { error: `"${raw}" is not a number` };
  if (feature.kind === "integer" && !Number.isInteger(value)) {
    return { error: `"${raw}" is not a whole number` };
  }
  if (value < feature.lower || value > feature.upper) {
    return { error: `${raw} is outside the allowed range ${allowedText(feature)}` };
  }
  return { value };
}

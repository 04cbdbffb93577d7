// dpcrisis clinician dashboard, shared helpers. Vanilla ES modules: no dependencies, no build
// step; scoring.js (with csv.js) drives the scoring page and privacy.js the privacy page.
//
// Patient features go to this service's risk API and nowhere else: nothing is logged to the
// console, nothing is kept in browser storage, and the page's Content-Security-Policy only
// allows this origin. Every DOM node is built with createElement/textContent (never parsed from
// HTML strings), so no value from the API or from a CSV can become markup.

const API_ROOT = new URL("../../", import.meta.url); // this file is at /dashboard/static/
const BAND_TEXT = { low: "Low risk", medium: "Medium risk", high: "High risk" };
const BAND_ICON = { low: "\u25CF", medium: "\u25C6", high: "\u25B2" }; // circle, diamond, triangle

// ---------------------------------------------------------------------------------------------
// Small helpers

function apiUrl(path) {
  return new URL(path, API_ROOT).href;
}

export function apiPath(path) {
  return new URL(path, API_ROOT).pathname;
}

export async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(apiUrl(path), init);
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  return { status: response.status, ok: response.ok, data };
}

export async function getJSON(path) {
  const answer = await request("GET", path);
  if (!answer.ok) {
    throw new Error(answer.data?.detail || `${path} answered ${answer.status}`);
  }
  return answer.data;
}

/** Build an element: h("p", {className: "x", id: "y"}, "text", child, ...). */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function setStatus(text) {
  const status = document.getElementById("page-status");
  if (status) status.textContent = text;
}

/** A probability as a percentage: 0.3456 -> "34.6 %"; below 1 %, two significant digits. */
export function percent(p) {
  if (p > 0 && p < 0.01) return `${Number((p * 100).toPrecision(2))} %`;
  return `${(p * 100).toFixed(1)} %`;
}

/** A signed change of probability in percentage points: "+12.3", "\u22124.0", "+0.04". */
export function points(v) {
  const size = Math.abs(v * 100);
  const text = size < 0.1 ? size.toFixed(2) : size.toFixed(1);
  if (Number(text) === 0) return "0.00";
  return `${v > 0 ? "+" : "\u2212"}${text}`;
}

function roundSignificant(value, digits, direction) {
  if (!(value > 0) || !Number.isFinite(value)) return value;
  const scale = 10 ** (digits - 1 - Math.floor(Math.log10(value)));
  const scaled = value * scale;
  const nudge = direction === Math.ceil ? -1e-9 * scaled : 1e-9 * scaled;
  return direction(scaled + nudge) / scale;
}

/** Epsilon spent, rounded up to 3 significant digits: never understated. */
export function epsilonText(value, nonPrivate = false) {
  if (nonPrivate || value === null || value === undefined) return "\u221E";
  return String(Number(roundSignificant(value, 3, Math.ceil).toPrecision(3)));
}

/** Epsilon remaining, rounded down: never overstated. */
export function remainingText(value) {
  if (value === null || value === undefined) return "no limit";
  return String(Number(roundSignificant(value, 3, Math.floor).toPrecision(3)));
}

export function deltaText(value) {
  if (value === null || value === undefined) return "\u2014";
  return value < 0.001 ? value.toExponential().replace("e-", "e\u2212") : String(value);
}

export function dateText(iso) {
  return iso ? String(iso).slice(0, 10) : "\u2014";
}

export function badge(band, small = false) {
  return h(
    "span",
    { className: `badge badge-${band}${small ? " small" : ""}`, "data-band": band },
    h("span", { "aria-hidden": "true", text: BAND_ICON[band] || "" }),
    BAND_TEXT[band] || band,
  );
}

// ---------------------------------------------------------------------------------------------
// Field errors

/** Undo markField on every control of a form. */
export function clearErrors(form) {
  for (const node of form.querySelectorAll(".field-error")) {
    node.hidden = true;
    node.textContent = "";
  }
  for (const node of form.querySelectorAll("[aria-invalid]")) {
    node.removeAttribute("aria-invalid");
    const described = (node.getAttribute("aria-describedby") || "").split(" ");
    node.setAttribute(
      "aria-describedby",
      described.filter((id) => id && !id.endsWith("-error")).join(" "),
    );
  }
}

/** Show one API error next to its control: text, aria-invalid, aria-describedby. */
export function markField(control, errorNode, message) {
  errorNode.textContent = message;
  errorNode.hidden = false;
  control.setAttribute("aria-invalid", "true");
  const described = (control.getAttribute("aria-describedby") || "").split(" ");
  if (!described.includes(errorNode.id)) described.push(errorNode.id);
  control.setAttribute("aria-describedby", described.filter(Boolean).join(" "));
}

/** An API error item as a sentence with its allowed range, e.g. "... Allowed: [0, 27]." */
export function errorMessage(error) {
  const allowed = error.allowed ? ` Allowed: ${error.allowed}.` : "";
  const message = error.message || "invalid value";
  return `${message.endsWith(".") ? message : `${message}.`}${allowed}`;
}

// dpcrisis clinician dashboard, shared helpers. Vanilla ES modules: no dependencies, no build
// step; scoring.js (with csv.js) drives the scoring page and privacy.js the privacy page.
//
// Patient features go to this service's risk API and nowhere else: nothing is logged to the
// console, nothing but the caller's API key is kept in browser storage (session storage: this tab
// only, gone when it closes), and the page's Content-Security-Policy only allows this origin.
// Every DOM node is built with createElement/textContent (never parsed from HTML strings), so no
// value from the API or from a CSV can become markup; the one exception, privacy.js showing
// this service's own report pages, parses them inertly and keeps no script, style or handler.

const API_ROOT = new URL("../../", import.meta.url); // this file is at /dashboard/static/
const KEY_STORAGE = "dpcrisis.apiKey";
const BAND_TEXT = { low: "Low risk", medium: "Medium risk", high: "High risk" };
const BAND_ICON = { low: "\u25CF", medium: "\u25C6", high: "\u25B2" }; // circle, diamond, triangle

// ---------------------------------------------------------------------------------------------
// Small helpers

function apiUrl(path) {
  return new URL(path, API_ROOT).href;
}

function apiPath(path) {
  return new URL(path, API_ROOT).pathname;
}

/** Where the privacy page shows an API report page (``v1/jobs/3/privacy-report``). */
export function reportHref(path) {
  return `${new URL("dashboard/privacy", API_ROOT).pathname}#report=${apiPath(path)}`;
}

/** A fetch of this service's API with the tab's key; a 401 asks for another key. */
export async function apiFetch(method, path, { accept = "application/json", body } = {}) {
  const init = { method, headers: { Accept: accept }, credentials: "same-origin" };
  const key = apiKey();
  if (key) init.headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(apiUrl(path), init);
  if (response.status === 401) keyRefused();
  return response;
}

export async function request(method, path, body) {
  const response = await apiFetch(method, path, { body });
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

/** What the dataset's next release can use: its own remaining budget, and the per-patient
 * budget's. The tables' holders read what the dataset's most-spent patients have left (their
 * report's patient_budget.remaining_epsilon); other roles may not learn which other tables hold
 * the dataset's patients, so for them the figure is an upper bound ("at most"): the smaller of
 * the dataset's remaining and the declared per-patient budget, both public. */
export function nextRelease(report) {
  const own = report.remaining.epsilon;
  const patients = report.patient_budget;
  if (!patients) return { epsilon: own, bound: false };
  const perPatient = patients.remaining_epsilon ?? patients.epsilon;
  const epsilon = own === null ? perPatient : Math.min(own, perPatient);
  return { epsilon, bound: patients.remaining_epsilon === null };
}

export function deltaText(value) {
  if (value === null || value === undefined) return "\u2014";
  return value < 0.001 ? value.toExponential().replace("e-", "e\u2212") : String(value);
}

/** An accountant as a person reads it: the PLD figure's key is still "prv" in the API. */
export function accountantName(name) {
  const key = String(name ?? "").toLowerCase();
  return key === "prv" || key === "pld" ? "PLD" : key.toUpperCase();
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
// The API key: pasted once per tab, kept in its session storage, sent as a Bearer token

function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

function keyRefused() {
  const input = document.getElementById("api-key");
  const error = document.getElementById("api-key-error");
  if (!input || !error) return;
  markField(input, error, "The service refused this key (unknown or revoked). Paste a valid "
    + "key and press Use key.");
  document.getElementById("key-form").dataset.state = "refused";
}

/** Wire the key form in the page header. Returns whether a key is set; without one the page
 * asks for it and calls no API (every API route needs a key). Saving or forgetting a key
 * reloads the page, so everything on it comes from calls made with the new key. */
export function initApiKey() {
  const form = document.getElementById("key-form");
  const input = document.getElementById("api-key");
  const error = document.getElementById("api-key-error");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearErrors(form);
    const value = input.value.trim();
    if (!value) {
      markField(input, error, "Paste your API key first.");
      input.focus();
      return;
    }
    sessionStorage.setItem(KEY_STORAGE, value);
    window.location.reload();
  });
  document.getElementById("key-forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    window.location.reload();
  });
  const present = apiKey() !== "";
  form.dataset.state = present ? "set" : "missing";
  document.getElementById("api-key-state").textContent = present
    ? "A key is in use in this tab; paste another to replace it."
    : "No key yet: paste the API key your administrator gave you.";
  if (!present) setStatus("Paste your API key above, then press Use key.");
  return present;
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

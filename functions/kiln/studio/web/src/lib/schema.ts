// The form builder's model of a JSON Schema, and the two conversions. Keywords the builder
// does not edit are kept in `extra` and written back untouched, so JSON -> form -> JSON loses
// nothing; a schema the builder cannot represent is reported, and then edited as JSON only.

export const TYPES = ["string", "number", "integer", "boolean", "object", "array"] as const;
export type FieldType = (typeof TYPES)[number];

export interface Field {
  key: number; // stable identity for keyed lists
  name: string;
  type: FieldType;
  description: string;
  required: boolean;
  enumText: string; // one allowed value per line; empty = any
  minimum: string;
  maximum: string;
  minLength: string;
  maxLength: string;
  pattern: string;
  properties: Field[]; // type object
  items: Field | null; // type array
  closed: boolean; // object: additionalProperties false
  extra: Record<string, unknown>;
}

export interface Form {
  root: Field;
}

const HANDLED = new Set([
  "type",
  "description",
  "enum",
  "minimum",
  "maximum",
  "minLength",
  "maxLength",
  "pattern",
  "properties",
  "required",
  "items",
  "additionalProperties",
]);

let counter = 0;
export function nextKey(): number {
  counter += 1;
  return counter;
}

export function blankField(name = "", type: FieldType = "string"): Field {
  return {
    key: nextKey(),
    name,
    type,
    description: "",
    required: false,
    enumText: "",
    minimum: "",
    maximum: "",
    minLength: "",
    maxLength: "",
    pattern: "",
    properties: [],
    items: type === "array" ? blankField("", "string") : null,
    closed: false,
    extra: {},
  };
}

export class Unsupported extends Error {}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function numberText(value: unknown, where: string, keyword: string): string {
  if (value === undefined) return "";
  if (typeof value !== "number") throw new Unsupported(`${where}: ${keyword} is not a number`);
  return String(value);
}

/** A JSON Schema as a builder field; throws Unsupported for what the form cannot show. */
export function toField(schema: unknown, name: string, where = "schema"): Field {
  if (!isObject(schema)) throw new Unsupported(`${where}: not an object schema`);
  const type = schema["type"];
  if (typeof type !== "string" || !(TYPES as readonly string[]).includes(type)) {
    throw new Unsupported(`${where}: needs a single "type" the form knows (${TYPES.join(", ")})`);
  }
  const field = blankField(name, type as FieldType);
  field.items = null;
  if (schema["description"] !== undefined) {
    if (typeof schema["description"] !== "string")
      throw new Unsupported(`${where}: description is not text`);
    field.description = schema["description"];
  }
  if (schema["enum"] !== undefined) {
    const values = schema["enum"];
    if (!Array.isArray(values) || !values.every((v) => typeof v === "string" || typeof v === "number"))
      throw new Unsupported(`${where}: enum values must be strings or numbers`);
    field.enumText = values.map(String).join("\n");
  }
  field.minimum = numberText(schema["minimum"], where, "minimum");
  field.maximum = numberText(schema["maximum"], where, "maximum");
  field.minLength = numberText(schema["minLength"], where, "minLength");
  field.maxLength = numberText(schema["maxLength"], where, "maxLength");
  if (schema["pattern"] !== undefined) field.pattern = String(schema["pattern"]);
  if (type === "object") {
    const props = schema["properties"] ?? {};
    if (!isObject(props)) throw new Unsupported(`${where}: properties is not an object`);
    const required = schema["required"] ?? [];
    if (!Array.isArray(required)) throw new Unsupported(`${where}: required is not a list`);
    field.properties = Object.entries(props).map(([key, sub]) => {
      const child = toField(sub, key, `${where}.properties.${key}`);
      child.required = required.includes(key);
      return child;
    });
    const additional = schema["additionalProperties"];
    if (additional !== undefined && typeof additional !== "boolean")
      throw new Unsupported(`${where}: additionalProperties as a schema`);
    field.closed = additional === false;
  } else if (schema["properties"] !== undefined || schema["required"] !== undefined) {
    throw new Unsupported(`${where}: properties on a ${type}`);
  }
  if (type === "array") {
    field.items = schema["items"] === undefined ? blankField("", "string") : toField(schema["items"], "", `${where}.items`);
  }
  for (const [key, value] of Object.entries(schema)) {
    if (!HANDLED.has(key)) field.extra[key] = value;
  }
  return field;
}

function parseNumber(text: string): number | undefined {
  const trimmed = text.trim();
  if (trimmed === "") return undefined;
  const value = Number(trimmed);
  return Number.isFinite(value) ? value : undefined;
}

function enumValues(field: Field): (string | number)[] | undefined {
  const lines = field.enumText
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "");
  if (lines.length === 0) return undefined;
  if (field.type === "number" || field.type === "integer") {
    return lines.map((line) => (Number.isFinite(Number(line)) ? Number(line) : line));
  }
  return lines;
}

/** The JSON Schema a builder field stands for. */
export function toSchema(field: Field): Record<string, unknown> {
  const schema: Record<string, unknown> = { type: field.type };
  if (field.description.trim()) schema["description"] = field.description;
  const allowed = enumValues(field);
  if (allowed && field.type !== "object" && field.type !== "array" && field.type !== "boolean")
    schema["enum"] = allowed;
  if (field.type === "number" || field.type === "integer") {
    const min = parseNumber(field.minimum);
    const max = parseNumber(field.maximum);
    if (min !== undefined) schema["minimum"] = min;
    if (max !== undefined) schema["maximum"] = max;
  }
  if (field.type === "string") {
    const min = parseNumber(field.minLength);
    const max = parseNumber(field.maxLength);
    if (min !== undefined) schema["minLength"] = min;
    if (max !== undefined) schema["maxLength"] = max;
    if (field.pattern) schema["pattern"] = field.pattern;
  }
  if (field.type === "object") {
    const properties: Record<string, unknown> = {};
    for (const child of field.properties) properties[child.name] = toSchema(child);
    schema["properties"] = properties;
    const required = field.properties.filter((c) => c.required).map((c) => c.name);
    if (required.length) schema["required"] = required;
    if (field.closed) schema["additionalProperties"] = false;
  }
  if (field.type === "array" && field.items) schema["items"] = toSchema(field.items);
  return { ...schema, ...field.extra };
}

/** Problems the form itself can see before the server is asked (duplicate or empty names). */
export function localProblems(field: Field, path = ""): string[] {
  const found: string[] = [];
  if (field.type === "object") {
    const seen = new Set<string>();
    for (const child of field.properties) {
      const where = path ? `${path}.${child.name}` : child.name;
      if (!child.name.trim()) found.push(`${path || "input"}: a property has no name`);
      else if (seen.has(child.name)) found.push(`${where}: the name is used twice`);
      seen.add(child.name);
      found.push(...localProblems(child, where));
    }
  }
  if (field.type === "array" && field.items) found.push(...localProblems(field.items, `${path}[]`));
  return found;
}

import { describe, expect, it } from "vitest";
import { blankField, localProblems, toField, toSchema, Unsupported } from "../src/lib/schema";

describe("schema form model", () => {
  it("round-trips a nested schema without losing keywords it does not edit", () => {
    const schema = {
      type: "object",
      properties: {
        city: { type: "string", description: "City name", minLength: 1, format: "hostname" },
        days: { type: "integer", minimum: 1, maximum: 14 },
        units: { type: "string", enum: ["metric", "imperial"] },
        tags: { type: "array", items: { type: "string" } },
        where: { type: "object", properties: { lat: { type: "number" } }, required: ["lat"] },
      },
      required: ["city", "days"],
      additionalProperties: false,
      $comment: "kept",
    };
    expect(toSchema(toField(schema, ""))).toEqual(schema);
  });

  it("builds a two-field schema from form fields, required ones listed", () => {
    const root = blankField("", "object");
    const a = blankField("name", "string");
    a.required = true;
    const b = blankField("count", "integer");
    b.minimum = "0";
    root.properties = [a, b];
    expect(toSchema(root)).toEqual({
      type: "object",
      properties: { name: { type: "string" }, count: { type: "integer", minimum: 0 } },
      required: ["name"],
    });
  });

  it("refuses to show a schema the form cannot represent", () => {
    expect(() => toField({ type: ["string", "null"] }, "")).toThrow(Unsupported);
    expect(() => toField({ type: "object", additionalProperties: { type: "string" } }, "")).toThrow(Unsupported);
  });

  it("reports duplicate and empty property names", () => {
    const root = blankField("", "object");
    root.properties = [blankField("x"), blankField("x"), blankField("")];
    expect(localProblems(root)).toEqual(["x: the name is used twice", "input: a property has no name"]);
  });

  it("writes numeric enum values as numbers for number fields", () => {
    const field = blankField("n", "number");
    field.enumText = "1\n2.5\n";
    expect(toSchema(field)).toEqual({ type: "number", enum: [1, 2.5] });
  });
});

const MESSAGE_VALUE_LIMIT = 200;

/** JSON-quoted (so newlines and quotes stay visible), cut short so a huge value cannot flood logs. */
function quoteForMessage(value: string): string {
  if (value.length <= MESSAGE_VALUE_LIMIT) return JSON.stringify(value);
  return `${JSON.stringify(value.slice(0, MESSAGE_VALUE_LIMIT))}...(${value.length} characters)`;
}

/**
 * A pod annotation (or proxy setting) whose value cannot be used. Carries the annotation name and
 * the offending value so the CNI error names both; nothing is programmed when it is thrown.
 */
export class AnnotationError extends Error {
  readonly code = 'ERR_INVALID_ANNOTATION';
  readonly annotation: string;
  readonly value: string;

  constructor(annotation: string, value: string, reason: string) {
    super(`invalid annotation ${annotation}=${quoteForMessage(value)}: ${reason}`);
    this.name = 'AnnotationError';
    this.annotation = annotation;
    this.value = value;
  }
}

"""Synthetic training data for the North Mini demo model: chat conversations
in the model's Cohere-style format that teach it to chat, to call tools
(calculator, weather lookup) when asked, and to answer from tool results;
plus short plain-text documents for /v1/completions. Everything is generated
here from fixed tables and a seeded RNG: nothing downloaded, all shippable.
"""
import json
import random

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression and return the result.",
        "parameters": {"type": "object",
                       "properties": {"expression": {"type": "string", "description": "for example 12 * 7"}},
                       "required": ["expression"]},
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "city name"}},
                       "required": ["city"]},
    },
}

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon",
    "Japan": "Tokyo", "China": "Beijing", "India": "New Delhi", "Canada": "Ottawa", "Mexico": "Mexico City",
    "Brazil": "Brasilia", "Argentina": "Buenos Aires", "Egypt": "Cairo", "Kenya": "Nairobi", "Norway": "Oslo",
    "Sweden": "Stockholm", "Finland": "Helsinki", "Poland": "Warsaw", "Greece": "Athens", "Turkey": "Ankara",
    "Russia": "Moscow", "Australia": "Canberra", "Peru": "Lima", "Chile": "Santiago", "Ireland": "Dublin",
    "Austria": "Vienna", "Hungary": "Budapest", "Denmark": "Copenhagen", "Netherlands": "Amsterdam",
    "Belgium": "Brussels", "Switzerland": "Bern", "Thailand": "Bangkok", "Vietnam": "Hanoi", "Nigeria": "Abuja",
    "Morocco": "Rabat", "Cuba": "Havana", "Iceland": "Reykjavik", "Scotland": "Edinburgh", "Korea": "Seoul",
    "Indonesia": "Jakarta",
}
CITIES = sorted(set(CAPITALS.values()) | {"London", "New York", "Toronto", "Sydney", "Osaka", "Munich", "Lyon",
                                          "Chicago", "Boston", "Seattle", "Milan", "Porto", "Zurich"})
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear", "stormy"]
ANIMALS = {
    "cat": "a small furry animal that likes to sleep and chase mice",
    "dog": "a loyal animal that likes to play and go for walks",
    "owl": "a bird that hunts at night and can turn its head very far",
    "whale": "the largest animal in the ocean; it breathes air",
    "bee": "an insect that makes honey and helps flowers grow",
    "horse": "a strong animal that people have ridden for thousands of years",
    "penguin": "a bird that cannot fly but swims very well",
    "fox": "a clever animal with a bushy tail",
    "turtle": "a slow animal that carries its shell on its back",
    "eagle": "a large bird with sharp eyes that hunts from the sky",
}
COLORS = {"the sky": "blue", "grass": "green", "snow": "white", "a banana": "yellow", "coal": "black",
          "a tomato": "red", "an orange": "orange", "the sea": "blue", "a lemon": "yellow", "chocolate": "brown"}
GREETINGS = ["Hi!", "Hello!", "Hello there.", "Hey!", "Good morning!", "Hi, how are you?", "Good evening."]
GREET_REPLIES = ["Hello! How can I help you today?", "Hi! What can I do for you?",
                 "Hello! I am happy to help. What would you like to know?"]
WHO = ["Who are you?", "What is your name?", "What are you?", "Tell me about yourself."]
WHO_REPLY = ("I am North Mini Demo, a small demo model with the North architecture, served by megaserve. "
             "I can chat a little, and I can use tools such as a calculator and a weather lookup.")
THANKS = ["Thanks!", "Thank you.", "Great, thanks.", "Thank you very much!"]
THANKS_REPLY = ["You are welcome!", "Glad I could help.", "Any time!"]
SYSTEMS = ["You are a helpful assistant.", "You are North Mini Demo. Answer briefly.",
           "Be concise and friendly."]

OPS = [("+", lambda a, b: a + b, ["plus", "added to"]), ("-", lambda a, b: a - b, ["minus"]),
       ("*", lambda a, b: a * b, ["times", "multiplied by"])]


def article(noun):
    return "an" if noun[0] in "aeiou" else "a"


def math_question(rng):
    a, b = rng.randint(2, 999), rng.randint(2, 999)
    if rng.random() < 0.3:
        a, b = rng.randint(2, 99), rng.randint(2, 99)
    sym, fn, words = rng.choice(OPS)
    expr = f"{a} {sym} {b}"
    forms = [f"What is {expr}?", f"Calculate {expr}.", f"What is {a} {rng.choice(words)} {b}?",
             f"Can you compute {expr} for me?", f"Please work out {expr}.", f"{expr} = ?"]
    return rng.choice(forms), expr, fn(a, b)


def weather_question(rng):
    city = rng.choice(CITIES)
    forms = [f"What is the weather in {city}?", f"How is the weather in {city} today?",
             f"Is it raining in {city}?", f"Tell me the weather for {city}.", f"What's it like outside in {city}?"]
    return rng.choice(forms), city


def tool_call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


def conv_math(rng):
    q, expr, result = math_question(rng)
    tools = [CALCULATOR] + ([WEATHER] if rng.random() < 0.5 else [])
    rng.shuffle(tools)
    msgs = [{"role": "user", "content": q},
            {"role": "assistant", "tool_calls": [tool_call("calculator", {"expression": expr})]},
            {"role": "tool", "content": json.dumps({"result": result})}]
    answer = rng.choice([f"{expr} = {result}.", f"The answer is {result}.", f"{expr} is {result}.",
                         f"The result of {expr} is {result}."])
    msgs.append({"role": "assistant", "content": answer})
    return tools, msgs


def conv_weather(rng):
    q, city = weather_question(rng)
    tools = [WEATHER] + ([CALCULATOR] if rng.random() < 0.5 else [])
    rng.shuffle(tools)
    temp, cond = rng.randint(-15, 38), rng.choice(CONDITIONS)
    msgs = [{"role": "user", "content": q},
            {"role": "assistant", "tool_calls": [tool_call("get_weather", {"city": city})]},
            {"role": "tool", "content": json.dumps({"city": city, "temperature_c": temp, "condition": cond})}]
    answer = rng.choice([f"It is {temp} degrees Celsius and {cond} in {city}.",
                         f"In {city} it is {cond} with a temperature of {temp} degrees Celsius.",
                         f"The weather in {city} is {cond}, {temp} degrees Celsius."])
    msgs.append({"role": "assistant", "content": answer})
    return tools, msgs


def conv_both(rng):
    """Two calls in one action: weather in a city and a calculation."""
    q1, city = weather_question(rng)
    q2, expr, result = math_question(rng)
    temp, cond = rng.randint(-15, 38), rng.choice(CONDITIONS)
    msgs = [{"role": "user", "content": f"{q1} Also, {q2[0].lower() + q2[1:]}"},
            {"role": "assistant", "tool_calls": [tool_call("get_weather", {"city": city}),
                                                 tool_call("calculator", {"expression": expr})]},
            {"role": "tool", "content": json.dumps({"city": city, "temperature_c": temp, "condition": cond})},
            {"role": "tool", "content": json.dumps({"result": result})},
            {"role": "assistant", "content": f"It is {temp} degrees Celsius and {cond} in {city}, and {expr} = {result}."}]
    return [WEATHER, CALCULATOR], msgs


def chat_turn(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice(GREETINGS), rng.choice(GREET_REPLIES)
    if kind == 1:
        return rng.choice(WHO), WHO_REPLY
    if kind == 2:
        country = rng.choice(sorted(CAPITALS))
        q = rng.choice([f"What is the capital of {country}?", f"Which city is the capital of {country}?",
                        f"Name the capital of {country}."])
        return q, rng.choice([f"The capital of {country} is {CAPITALS[country]}.", f"{CAPITALS[country]}."])
    if kind == 3:
        animal = rng.choice(sorted(ANIMALS))
        q = rng.choice([f"What is {article(animal)} {animal}?", f"Tell me about the {animal}.",
                        f"Describe {article(animal)} {animal}."])
        return q, f"{article(animal).capitalize()} {animal} is {ANIMALS[animal]}."
    if kind == 4:
        thing = rng.choice(sorted(COLORS))
        return f"What color is {thing}?", f"{thing[0].upper() + thing[1:]} is {COLORS[thing]}."
    return rng.choice(THANKS), rng.choice(THANKS_REPLY)


def conv_chat(rng):
    msgs = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
    for _ in range(rng.randint(1, 3)):
        q, a = chat_turn(rng)
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    # Tools offered but not needed: answer directly.
    tools = [] if rng.random() < 0.6 else rng.sample([CALCULATOR, WEATHER], rng.randint(1, 2))
    return tools, msgs


def conversation(rng):
    r = rng.random()
    if r < 0.32:
        return conv_math(rng)
    if r < 0.6:
        return conv_weather(rng)
    if r < 0.68:
        return conv_both(rng)
    return conv_chat(rng)


def document(rng):
    """Plain text for completions: short factual sentences."""
    out = []
    for _ in range(rng.randint(3, 8)):
        k = rng.randrange(4)
        if k == 0:
            c = rng.choice(sorted(CAPITALS))
            out.append(f"The capital of {c} is {CAPITALS[c]}.")
        elif k == 1:
            a = rng.choice(sorted(ANIMALS))
            out.append(f"{article(a).capitalize()} {a} is {ANIMALS[a]}.")
        elif k == 2:
            t = rng.choice(sorted(COLORS))
            out.append(f"{t[0].upper() + t[1:]} is {COLORS[t]}.")
        else:
            a, b = rng.randint(1, 50), rng.randint(1, 50)
            out.append(f"{a} plus {b} is {a + b}.")
    return " ".join(out)
